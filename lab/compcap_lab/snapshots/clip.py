"""A random-weight ``CLIPModel`` snapshot (an image-text scorer, the rankers' kind): text and vision
towers, the ``bpe`` tokenizer with ``<|startoftext|>`` / ``<|endoftext|>``, a CLIP image processor resizing
the shortest edge to the image size + 8 and cropping the image size at the centre (as CLIP's does, at 224).

Size ``"tiny"`` (the only one): 32 wide, 2 + 2 layers, 48-pixel images in 16 × 16 patches, projections of
16, 120 tokens."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compcap_lab.snapshots import TINY, parameters, tower
from compcap_lab.snapshots.tokenizer import bpe


@dataclass(frozen=True)
class Size:
    vision: dict[str, Any]  # CLIPVisionConfig's arguments but the image size
    text: dict[str, Any]  # CLIPTextConfig's but the vocabulary and the token ids
    projection_dim: int
    image_size: int


SIZES = {
    "tiny": Size(
        vision={**TINY, "patch_size": 16},
        text={**TINY, "max_position_embeddings": 32},
        projection_dim=16,
        image_size=48,
    ),
}


def build(out: Path, size: str = "tiny", *, image_size: int | None = None, seed: int = 0) -> Path:
    """Write the snapshot of ``size`` (a key of ``SIZES``; ``image_size`` replaces the size's) into ``out``,
    the weights from torch's initialisation seeded with ``seed``; return ``out``."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextConfig, CLIPVisionConfig

    preset = SIZES[size]
    image = preset.image_size if image_size is None else image_size
    projection = preset.projection_dim
    tokenizer = bpe(start="<|startoftext|>")
    ids = tokenizer.convert_tokens_to_ids(["<|startoftext|>", "<|endoftext|>", "<pad>"])
    text = CLIPTextConfig(
        vocab_size=len(tokenizer), **preset.text, bos_token_id=ids[0], eos_token_id=ids[1],
        pad_token_id=ids[2], projection_dim=projection,
    )  # fmt: skip
    vision = CLIPVisionConfig(**preset.vision, image_size=image, projection_dim=projection)
    torch.manual_seed(seed)
    model = CLIPModel(
        CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=projection)
    )
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(
        size={"shortest_edge": image + 8}, crop_size={"height": image, "width": image}
    ).save_pretrained(out)
    return out


def describe(out: Path) -> dict[str, Any]:
    """What the snapshot in ``out`` is, for a report: parameters, the vision and text towers' sizes."""
    from transformers import CLIPConfig

    config: Any = CLIPConfig.from_pretrained(out)  # sub-configs: typed loosely
    vision, text = config.vision_config, config.text_config
    return {
        "parameters": parameters(out),
        "vision": tower(vision, image=True),
        "text": tower(text, image=False),
    }
