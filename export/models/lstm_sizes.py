"""The sizes of the LSTM captioners (SAT, BUTD/BUTR), checked once for both."""

from __future__ import annotations

from dataclasses import dataclass

from export.presets import Preset
from service.checks import above


@dataclass(frozen=True)
class LSTMSizes:
    """V ``vocab_size`` words, D ``region_dim`` per region, ``word_dim`` per embedded word, L
    ``hidden_dim`` per LSTM, A ``attention_dim`` in the attention's hidden layer; ``dropout`` before
    the output layer."""

    vocab_size: int
    region_dim: int
    word_dim: int
    hidden_dim: int
    attention_dim: int
    dropout: float = 0.2

    def __post_init__(self) -> None:
        above(0, vocab_size=self.vocab_size, region_dim=self.region_dim, hidden_dim=self.hidden_dim)
        above(0, word_dim=self.word_dim, attention_dim=self.attention_dim)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @classmethod
    def of(cls, vocab_size: int, region_dim: int, preset: Preset) -> LSTMSizes:
        """The sizes ``preset`` gives a captioner of ``vocab_size`` words over ``region_dim`` regions."""
        return cls(vocab_size, region_dim, preset.word_dim, preset.hidden_dim, preset.attention_dim)


__all__ = ["LSTMSizes"]
