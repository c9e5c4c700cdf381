"""A transformers ``GitForCausalLM`` (GIT: a CLIP vision tower, a visual projection and one BERT-like
text transformer) in CompCap's model contract, version 2 (docs/architecture.md):
two graphs around the unchanged transformers module.

GIT is decoder-only: ``GitModel.forward`` puts the image's projected features in front of the text's
embeddings and runs one transformer over both, under a mask in which the image positions see each
other (both ways) and every text position sees all the image positions and the text positions up to
itself. CompCap splits that forward where the image ends:

- ``Encoder``: ``image`` uint8 [B, H, W, 3] at the image processor's size → ``memory`` float32 [B, M, D]
  (``git.image_encoder``'s last hidden state through ``git.visual_projection``: what ``GitModel``
  prepends to the text for a single image, M = patches + 1) and ``state`` float32 [B, 1] (unused: the
  step reads the whole prefix). The image processor's rescale and mean/std normalisation run inside
  the graph; resizing (and cropping) to its size is the gateway's.
- ``Step``: the contract's step (``export.models.step_contract``; prefixes start with ``[CLS]``, the
  ``bos_token_id`` generate starts with; ``state`` [N, 1] passed through unchanged). It is
  the rest of ``GitModel.forward`` with the row's image features given instead of ``pixel_values``:
  ``git.embeddings`` of the tokens (text positions 0 … T-1, as generate numbers them), the features
  concatenated in front, GIT's mask (with the padding after ``length`` masked as ``attention_mask``
  would), ``git.encoder``'s layers, and ``output`` at the row's last real token. ``attention`` is the
  last layer's self-attention from that position onto the M image positions, averaged over its heads
  (the layer closest to the words, as for ``export.hf.architectures.ved``; it does not sum to 1, the rest
  of the weight being on the text).

Video GIT checkpoints (``num_image_with_embedding``: several frames, each with a temporal embedding)
are refused: the contract's encoder reads one image."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from export.hf.architecture import Adapted, Architecture
from export.hf.pixels import CaptionerEncoder
from export.hf.snapshot import Snapshot, SnapshotError, offline
from export.models.step_contract import StepInputs, StepModule, StepOutputs
from service.manifest import Preprocessing


class Encoder(CaptionerEncoder):
    """uint8 images → (memory, state) of a ``GitForCausalLM`` (see module docstring)."""

    def memory(self, pixel_values: torch.Tensor) -> torch.Tensor:
        git = self.model.git
        return git.visual_projection(git.image_encoder(pixel_values).last_hidden_state)


class Step(StepModule):
    """One decoding step for rows of many images (see module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model: Any = model

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        memory, image_index, tokens, length, state = inputs
        git = self.model.git
        visual = memory.index_select(0, image_index)
        text = git.embeddings(input_ids=tokens)
        hidden = torch.cat((visual, text.to(visual.dtype)), dim=1)
        m = visual.shape[1]
        positions = torch.arange(hidden.shape[1], device=tokens.device)
        query, key = positions.view(-1, 1), positions.view(1, -1)
        # image keys: seen by every position; text keys: by themselves and later positions (causal),
        # and not at all past the row's length (its padding)
        allowed = (key < m) | (key <= query)
        allowed = allowed.unsqueeze(0) & (key < m + length.view(-1, 1)).unsqueeze(1)
        mask = torch.zeros(allowed.shape, dtype=hidden.dtype, device=hidden.device)
        mask = mask.masked_fill(~allowed, torch.finfo(hidden.dtype).min).unsqueeze(1)  # [N, 1, S, S]
        layers = list(git.encoder.layer)
        seen: list[torch.Tensor] = []
        hook = layers[-1].attention.self.register_forward_hook(lambda _m, _i, out: seen.append(out[1]))
        try:
            for layer in layers:
                hidden = layer(hidden, mask)
        finally:
            hook.remove()
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        last = m + length - 1
        logits = self.model.output(hidden[rows, last])
        logprobs = torch.log_softmax(logits.to(torch.float32), dim=-1)
        attention = seen[-1][rows, :, last, :m].mean(dim=1)
        return logprobs, state, attention


def adapt(snapshot: Snapshot, pre: Preprocessing) -> Adapted:
    """Load the snapshot offline (eager attention, so that the step can return its attention) and wrap
    it; token ids from its generation config (generate starts at ``bos_token_id``, GIT's ``[CLS]``)."""
    with offline():
        from transformers import GitForCausalLM

        model = GitForCausalLM.from_pretrained(
            str(snapshot.path), local_files_only=True, attn_implementation="eager"
        ).eval()
    gen, config = model.generation_config, model.config
    if config.num_image_with_embedding is not None:
        raise SnapshotError(
            f"{snapshot.path}: a video GIT (num_image_with_embedding={config.num_image_with_embedding}): "
            "CompCap's encoder reads one image"
        )
    start = gen.bos_token_id if gen.bos_token_id is not None else config.bos_token_id
    eos = gen.eos_token_id if gen.eos_token_id is not None else config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    pad = gen.pad_token_id if gen.pad_token_id is not None else config.pad_token_id
    if start is None or eos is None:
        raise SnapshotError("the snapshot's generation config names no bos_token_id / eos_token_id")
    return Adapted(
        model=model,
        encoder=Encoder(model, pre.rescale, pre.mean, pre.std),
        step=Step(model),
        vocab_size=int(config.vocab_size),
        start=int(start),
        eos=int(eos),
        pad=int(pad if pad is not None else eos),
        max_tokens=int(gen.max_length or 20),
        early_stopping=gen.early_stopping is True,  # True, False or "never" (read as False)
    )


ARCHITECTURE = Architecture("git", "captioner", "GitForCausalLM", adapt)
