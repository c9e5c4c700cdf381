"""A transformers ``BlipForConditionalGeneration`` (BLIP's captioner) in CompCap's model contract, version
2 (docs/architecture.md): two graphs around the unchanged transformers module, as
``export.hf.architectures.ved`` does for a ``VisionEncoderDecoderModel``.

- ``Encoder``: ``image`` uint8 [B, H, W, 3] at the image processor's size → ``memory`` float32 [B, M, D]
  (the vision model's last hidden states, after its final layer norm: the ``image_embeds`` that
  ``generate()`` hands the text decoder) and ``state`` float32 [B, 1] (unused). Rescale and mean/std
  normalisation run inside the graph.
- the step (``export.hf.step.CrossAttentionStep`` around its ``text_decoder``): the contract's step
  (``export.models.step_contract``; prefixes start with the text config's ``bos_token_id``,
  ``[DEC]``); ``attention`` is the text decoder's last layer's cross-attention, as ``ved``'s.

What ``BlipForConditionalGeneration.generate()`` does, and so what the ids here are: it starts every
caption with ``[bos_token_id]`` (it builds ``[decoder_input_ids, eos_token_id]`` — ``decoder_input_ids``
is the text config's ``bos_token_id`` — sets column 0 to ``bos_token_id`` and drops the last column),
calls the text decoder's ``generate()`` with ``eos_token_id=sep_token_id`` (``[SEP]`` ends a caption;
the text config's own ``eos_token_id`` is never the end) and ``pad_token_id=pad_token_id``, every image
position visible to the cross-attention; it forces or strips no token. That inner ``generate()`` reads
the *text decoder's* generation config (made from the text config), not the snapshot's
``generation_config.json``, so its ``max_length`` is the text decoder's, or generate's default of 20
new tokens after the start token, capped at ``max_position_embeddings``.

With ``--step cached`` / ``kv`` (or ``auto`` where measured faster) the step is
``export.hf.step.ImageCacheStep`` or ``export.hf.kv_step.KeyValueStep`` around the same decoder: the
same outputs, the cross-attention projected once per image (``cached``), or for ``kv`` each row's
self-attention keys and values carried in ``state`` and the cross-attention folded into the query and
output (contract v3; the encoder's ``state`` is then zeros [B, S])."""

from __future__ import annotations

from typing import Any

import torch

from export.hf.architecture import Adapted, Architecture
from export.hf.kv_step import decoder_steps
from export.hf.pixels import CaptionerEncoder
from export.hf.snapshot import Snapshot, SnapshotError, offline
from service.manifest import Preprocessing

DEFAULT_NEW_TOKENS = 20  # generate()'s max_length when nothing sets one: 20 tokens after the prompt


class Encoder(CaptionerEncoder):
    """uint8 images → (memory, state) of a ``BlipForConditionalGeneration`` (see module docstring)."""

    def memory(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model.vision_model(pixel_values=pixel_values).last_hidden_state


def max_tokens(gen: Any, max_positions: int | None) -> int:
    """The inner ``generate()``'s ``max_length`` for a prompt of one token (the start token counted):
    ``max_new_tokens`` + 1 if set, else ``max_length`` if set, else 20 + 1 capped at the decoder's
    position embeddings (generate's rules)."""
    if gen.max_new_tokens is not None:
        return int(gen.max_new_tokens) + 1
    if gen.max_length is not None:
        return int(gen.max_length)
    default = DEFAULT_NEW_TOKENS + 1
    return min(default, int(max_positions)) if max_positions is not None else default


def adapt(snapshot: Snapshot, pre: Preprocessing) -> Adapted:
    """Load the snapshot offline (eager attention, so that the step can return its cross-attention)
    and wrap it; token ids and lengths as its ``generate()`` uses them (module docstring)."""
    with offline():
        from transformers import BlipForConditionalGeneration

        model = BlipForConditionalGeneration.from_pretrained(
            str(snapshot.path), local_files_only=True, attn_implementation="eager"
        ).eval()
    text = model.config.text_config
    start, end, pad = text.bos_token_id, text.sep_token_id, text.pad_token_id
    if start is None or end is None:
        raise SnapshotError("the snapshot's text config names no bos_token_id / sep_token_id")
    gen = model.text_decoder.generation_config  # what BLIP's generate() hands on to (module docstring)
    tokens = max_tokens(gen, getattr(text, "max_position_embeddings", None))
    vision = model.config.vision_config
    fusion = (
        ("vit", int(vision.num_attention_heads), int(vision.hidden_size)),
        ("bert", int(text.num_attention_heads), int(text.hidden_size)),
    )
    return Adapted(
        model=model,
        encoder=Encoder(model, pre.rescale, pre.mean, pre.std),
        **decoder_steps(model.text_decoder, int(start), tokens),
        vocab_size=int(text.vocab_size),
        start=int(start),
        eos=int(end),
        pad=int(pad if pad is not None else end),
        max_tokens=tokens,
        early_stopping=gen.early_stopping is True,  # True, False or "never" (read as False); default False
        fusion=fusion,
    )


ARCHITECTURE = Architecture("blip", "captioner", "BlipForConditionalGeneration", adapt)
