"""Build presets: dataset size, model widths and training lengths for ``compcap-lab build``."""

from __future__ import annotations

from dataclasses import dataclass

from service.checks import above


@dataclass(frozen=True)
class Preset:
    name: str
    train_images: int
    test_images: int
    image_size: int = 96
    grid: int = 6
    encoder_channels: tuple[int, int, int] = (24, 48, 96)
    region_dim: int = 128
    encoder_epochs: int = 6
    word_dim: int = 128
    hidden_dim: int = 192
    joint_dim: int = 192
    attention_dim: int = 128
    # the cap: captioners are selected on their split's val BLEU-4 (Nikolaus et al., 2019, §4-5)
    caption_epochs: int = 6
    patience: int = 2  # stop after this many epochs without a better val BLEU-4
    val_images: int = 1000  # at most this many val images are decoded after each epoch
    ranker_epochs: int = 5
    batch_size: int = 256
    max_length: int = 16
    learning_rate: float = 3e-3
    ranker_learning_rate: float = 5e-4
    gradnorm_alpha: float = 2.5
    gradnorm_every: int = 8
    margin: float = 0.2
    hardest_negative_weight: float = 0.5
    encoder_batch_size: int = 128
    encoder_learning_rate: float = 2e-3
    eval_images: int = 500
    held_out_group: int | None = 1  # systematicity group the default repository never sees
    transformer_dim: int = 128
    transformer_heads: int = 4
    transformer_layers: int = 3
    memory_slots: int = 16
    transformer_learning_rate: float = 1e-3
    zoo_caption_epochs: int = 5  # the zoo's cap (12 captioners within 30 min on 2 cores)
    zoo_eval_images: int = 5000
    # probe sets written into the repository (export/probesets): images per pair (systematicity comb and
    # no_comb each, substitutivity) and per object count (productivity); the substitution table keeps
    # synonym pairs whose two words occur this often in the training captions
    probe_images_per_pair: int = 50
    probe_images_per_bucket: int = 50
    probe_min_synonym_count: int = 200
    # minimal pairs per held-out pair of the counterfactual set (compcap probesets --kind counterfactual)
    probe_minimal_pairs: int = 200

    def __post_init__(self) -> None:
        positive = (
            "train_images",
            "test_images",
            "region_dim",
            "hidden_dim",
            "joint_dim",
            "batch_size",
            "caption_epochs",
            "zoo_caption_epochs",
            "patience",
            "val_images",
            "probe_images_per_pair",
            "probe_images_per_bucket",
            "probe_min_synonym_count",
            "probe_minimal_pairs",
        )
        above(0, **{field: getattr(self, field) for field in positive})


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        train_images=240,
        test_images=40,
        encoder_channels=(8, 16, 16),
        region_dim=16,
        encoder_epochs=1,
        word_dim=16,
        hidden_dim=24,
        joint_dim=16,
        attention_dim=16,
        caption_epochs=1,
        ranker_epochs=1,
        batch_size=64,
        eval_images=20,
        transformer_dim=16,
        transformer_heads=2,
        memory_slots=4,
        zoo_caption_epochs=2,
        zoo_eval_images=200,
        probe_images_per_pair=3,
        probe_images_per_bucket=4,
        probe_min_synonym_count=3,
        probe_minimal_pairs=4,
    ),
    "default": Preset(name="default", train_images=6000, test_images=1000),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
