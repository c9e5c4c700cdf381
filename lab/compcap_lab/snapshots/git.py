"""A random-weight ``GitForCausalLM`` snapshot (a decoder-only captioner: the image's projected features in
front of the text in one transformer): a CLIP-style vision tower of patch 16, a text transformer, the
``git_wordpiece`` tokenizer (BERT's, as GIT's: ``[CLS]`` starts a caption, ``[SEP]`` ends it, ``[PAD]``
pads), and the CLIP image processor GIT's processor uses (shortest-edge resize and centre crop).

Size ``"tiny"`` (the only one): 32 wide, 2 + 2 layers, 64 × 64 images, 120 tokens, the weights drawn
wider than GIT's default (initializer range 0.3) so that its random captions are words, not near-ties,
dropout off, generation ``max_length`` 12. With random weights alone ``[SEP]`` is one of 120 tokens and
hardly ever wins, so its output bias is set to ``end_bias`` 3: on the tests' images about half of the
captions end before ``max_length``, one in ten at once (an empty caption, as ``generate`` gives it too)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compcap_lab.snapshots import TINY, parameters, tower
from compcap_lab.snapshots.tokenizer import git_wordpiece


@dataclass(frozen=True)
class Size:
    vision: dict[str, Any]  # the vision tower's config but the image size
    text: dict[str, Any]  # GitConfig's but the vocabulary, the token ids and dropout (off)
    image_size: int
    vocab: int  # the tokenizer's, as trained
    max_length: int  # generate's
    end_bias: float  # [SEP]'s output bias


SIZES = {
    "tiny": Size(
        vision={**TINY, "patch_size": 16},
        text={**TINY, "max_position_embeddings": 64, "initializer_range": 0.3},
        image_size=64,
        vocab=120,
        max_length=12,
        end_bias=3.0,
    ),
}


def build(
    out: Path,
    size: str = "tiny",
    *,
    image_size: int | None = None,
    seed: int = 0,
    max_length: int | None = None,
    end_bias: float | None = None,
) -> Path:
    """Write the snapshot of ``size`` (a key of ``SIZES``; ``image_size``, ``max_length`` and ``end_bias``
    replace the size's) into ``out``, the weights from torch's initialisation seeded with ``seed``; return
    ``out``."""
    import torch
    from transformers import CLIPImageProcessor, GitConfig, GitForCausalLM

    preset = SIZES[size]
    image = preset.image_size if image_size is None else image_size
    tokenizer = git_wordpiece(preset.vocab)
    pad, cls, sep = (tokenizer.convert_tokens_to_ids(t) for t in ("[PAD]", "[CLS]", "[SEP]"))
    config = GitConfig(
        vision_config={**preset.vision, "image_size": image}, vocab_size=len(tokenizer), **preset.text,
        pad_token_id=pad, bos_token_id=cls, eos_token_id=sep, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = GitForCausalLM(config).eval()
    with torch.no_grad():
        model.output.bias[sep] = preset.end_bias if end_bias is None else end_bias
    gen = model.generation_config
    gen.bos_token_id, gen.pad_token_id, gen.eos_token_id = cls, pad, sep
    gen.max_length = preset.max_length if max_length is None else max_length
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(
        size={"shortest_edge": image}, crop_size={"height": image, "width": image}
    ).save_pretrained(out)
    return out


def describe(out: Path) -> dict[str, Any]:
    """What the snapshot in ``out`` is, for a report: parameters, the vision tower's and text side's sizes,
    generate's ``max_length``."""
    from transformers import GenerationConfig, GitConfig

    config: Any = GitConfig.from_pretrained(out)  # sub-configs: typed loosely
    vision = config.vision_config
    return {
        "parameters": parameters(out),
        "vision": tower(vision, image=True),
        "text": tower(config, image=False),
        "max_length": GenerationConfig.from_pretrained(out).max_length,
    }
