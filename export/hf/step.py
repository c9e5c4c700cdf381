"""The contract's step (``export.models.step_contract``; ``state`` [N, 1], unused) of an
encoder–decoder captioner whose text decoder cross-attends to the image (ViT + GPT-2's ``decoder``,
BLIP's ``text_decoder``): the decoder runs on each row's prefix with its image's states (every image
position visible, as generate()'s all-ones mask), the next-token log-probs are read after the row's
last real token, and ``attention`` is the last layer's cross-attention from that position averaged over
its heads (the layer closest to the words, as Cornia et al. (2022) read attention; no head singled out).

``ImageCacheStep`` computes the same outputs with the cross-attention keys and values projected once
per image of the call instead of once per row: a one-token pass of the decoder over the ``I`` images
fills transformers' own ``EncoderDecoderCache`` with them, the rows gather theirs by ``image_index``,
and the decoder reads them from that pre-filled cache (its ``is_updated`` path, as ``generate()`` does
after its first step) instead of projecting its states again. With a beam of K the projection — most of
a step's work for a ViT-base encoder's 197 states — is done K times less; the one-token pass costs a
little, so the import keeps whichever graph it measured faster (``export.hf.step_choice``). A third
form, ``export.hf.kv_step.KeyValueStep`` (contract v3), also carries each row's self-attention keys and
values in the state and runs the decoder on one new token per row."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from export.models.step_contract import StepInputs, StepModule, StepOutputs


class CrossAttentionStep(StepModule):
    """The step (module docstring) around ``decoder``, its cross-attention projected for every row."""

    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.decoder: Any = decoder

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        return self._decode(inputs, use_cache=False)

    def _decode(self, inputs: StepInputs, **cache: Any) -> StepOutputs:
        """The decoder on each row's prefix with its image's states (``cache``: transformers' cache
        arguments); the contract's outputs."""
        memory, image_index, tokens, length, state = inputs
        encoder_states = memory.index_select(0, image_index)
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        mask = (positions < length.unsqueeze(1)).to(torch.int64)
        out = self.decoder(
            input_ids=tokens,
            attention_mask=mask,
            encoder_hidden_states=encoder_states,
            output_attentions=True,
            **cache,
        )
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        last = length - 1
        logprobs = torch.log_softmax(out.logits[rows, last].to(torch.float32), dim=-1)
        attention = out.cross_attentions[-1][rows, :, last].mean(dim=1)
        return logprobs, state, attention


class ImageCacheStep(CrossAttentionStep):
    """``CrossAttentionStep`` with the cross-attention keys and values projected once per image (module
    docstring); ``start`` is the token of the one-token pass that fills the cache (any token would do:
    the cross-attention projections do not depend on it)."""

    def __init__(self, decoder: nn.Module, start: int) -> None:
        super().__init__(decoder)
        self.start = int(start)

    def image_cross_cache(self, memory: torch.Tensor, image_index: torch.Tensor) -> Any:
        """A ``DynamicCache`` of each row's cross-attention keys and values ([N, H, M, d] per layer),
        projected once per image by a one-token pass over the ``I`` images and gathered by
        ``image_index``."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        first = torch.full((memory.shape[0], 1), self.start, dtype=torch.int64, device=memory.device)
        per_image = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.decoder(input_ids=first, encoder_hidden_states=memory, cache=per_image, use_cache=True)
        cross = DynamicCache()
        layers: Any = per_image.cross_attention_cache.layers  # DynamicLayer: keys, values [I, H, M, d]
        for layer, cached in enumerate(layers):
            keys, values = cached.keys, cached.values
            cross.update(keys.index_select(0, image_index), values.index_select(0, image_index), layer)
        return cross

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cross = self.image_cross_cache(inputs.memory, inputs.image_index)
        return self._decode(inputs, cache=EncoderDecoderCache(DynamicCache(), cross), use_cache=True)


__all__ = ["CrossAttentionStep", "ImageCacheStep"]
