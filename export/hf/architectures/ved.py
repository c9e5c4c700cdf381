"""A transformers ``VisionEncoderDecoderModel`` (e.g. ViT + GPT-2) in CompCap's model contract, version 2
(docs/architecture.md): two graphs around the unchanged transformers module.

- ``Encoder``: ``image`` uint8 [B, H, W, 3] at the image processor's size → ``memory`` float32 [B, M, D]
  (the vision encoder's last hidden states, projected to the decoder's width where the model does so)
  and ``state`` float32 [B, 1] (unused: the decoder reads the whole prefix). The image processor's
  rescale and mean/std normalisation run inside the graph; resizing to its size is the gateway's.
- the step (``export.hf.step.CrossAttentionStep`` around its ``decoder``): the contract's step
  (``export.models.step_contract``; prefixes start with the decoder start token, ``state`` [N, 1]
  passed through unchanged); ``attention`` is the last decoder layer's cross-attention from the row's
  last real token, averaged over its heads (the layer closest to the words, as Cornia et al.'s
  explanation study reads its attention maps; every head counts equally because none is singled out
  as the grounding one).

With ``--step cached`` / ``kv`` (or ``auto`` where measured faster) the step is
``export.hf.step.ImageCacheStep`` or ``export.hf.kv_step.KeyValueStep`` around the same decoder: the
same outputs, the cross-attention projected once per image (``cached``), or for ``kv`` each row's
self-attention keys and values carried in ``state`` and the cross-attention folded into the query and
output (contract v3; the encoder's ``state`` is then zeros [B, S])."""

from __future__ import annotations

import torch

from export.hf.architecture import Adapted, Architecture
from export.hf.kv_step import decoder_steps
from export.hf.pixels import CaptionerEncoder
from export.hf.snapshot import Snapshot, SnapshotError, offline
from service.manifest import Preprocessing


class Encoder(CaptionerEncoder):
    """uint8 images → (memory, state) of a ``VisionEncoderDecoderModel`` (see module docstring)."""

    def memory(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.model.encoder(pixel_values=pixel_values).last_hidden_state
        project = getattr(self.model, "enc_to_dec_proj", None)
        return hidden if project is None else project(hidden)


def adapt(snapshot: Snapshot, pre: Preprocessing) -> Adapted:
    """Load the snapshot offline (eager attention, so that the step can return its cross-attention)
    and wrap it; token ids from its generation config."""
    with offline():
        from transformers import VisionEncoderDecoderModel

        model = VisionEncoderDecoderModel.from_pretrained(
            str(snapshot.path), local_files_only=True, attn_implementation="eager"
        ).eval()
    gen, config = model.generation_config, model.config
    start = (
        gen.decoder_start_token_id
        if gen.decoder_start_token_id is not None
        else config.decoder_start_token_id
    )
    eos = gen.eos_token_id if gen.eos_token_id is not None else config.decoder.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    pad = gen.pad_token_id if gen.pad_token_id is not None else config.pad_token_id
    if start is None or eos is None:
        raise SnapshotError("the snapshot's generation config names no decoder_start_token_id / eos_token_id")
    tokens = int(gen.max_length or 20)
    enc, dec = config.encoder, config.decoder
    fusion = None
    if enc.model_type == "vit" and dec.model_type == "gpt2":
        fusion = (
            ("vit", int(enc.num_attention_heads), int(enc.hidden_size)),
            ("gpt2", int(dec.n_head), int(dec.n_embd)),
        )
    return Adapted(
        model=model,
        encoder=Encoder(model, pre.rescale, pre.mean, pre.std),
        **decoder_steps(model.decoder, int(start), tokens),
        vocab_size=int(config.decoder.vocab_size),
        start=int(start),
        eos=int(eos),
        pad=int(pad if pad is not None else eos),
        max_tokens=tokens,
        early_stopping=gen.early_stopping is True,  # True, False or "never" (read as False)
        fusion=fusion,
    )


ARCHITECTURE = Architecture(
    "vision-encoder-decoder", "captioner", "VisionEncoderDecoderModel", adapt, example="ViT + GPT-2"
)
