"""One caption request inside the engine: its images, its frozen ``SearchParams``, an explicit status and
the future its caller awaits (vLLM ``v1/request.py`` shape)."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

import numpy as np

from service.engine.beam import Hypothesis
from service.engine.guide import GuideState
from service.engine.observer import StepObserver
from service.engine.params import SearchParams
from service.engine.runner import Encoded


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued for admission
    ENCODING = "encoding"  # admitted: rows reserved, visual encoder + init running
    DECODING = "decoding"  # its images are in the beam batch
    RANKING = "ranking"  # search done, rows freed, ranker scoring its beams
    FINISHED = "finished"
    CANCELLED = "cancelled"  # its caller stopped waiting (deadline, disconnect)
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (RequestStatus.FINISHED, RequestStatus.CANCELLED, RequestStatus.FAILED)


class Priority(enum.IntEnum):
    """Admission order: user captions first; probe, shadow and study traffic fills what they leave."""

    USER = 0
    BACKGROUND = 1


@dataclass(frozen=True)
class DecodeResult:
    hypotheses: list[list[Hypothesis]]  # per image, best score first
    ranker_scores: list[list[float]] | None  # per image, aligned with ``hypotheses``
    iterations: int  # step calls this request took part in
    timings_ms: dict[str, float]  # queue, encode, decode, rerank
    domain: tuple[list[float], list[bool]] | None = None  # per image: typicality score, in domain


@dataclass(eq=False)
class Request:
    key: int
    images: np.ndarray  # uint8 [I, H, W, 3]
    params: SearchParams
    future: asyncio.Future[DecodeResult]
    deadline: float  # time.monotonic()
    priority: Priority = Priority.USER
    observer: StepObserver | None = None
    status: RequestStatus = RequestStatus.WAITING
    holds_rows: bool = False  # rows reserved against the scheduler's budget
    submitted: float = field(default_factory=time.perf_counter)
    encode_start: float = 0.0
    decode_start: float = 0.0
    decode_end: float = 0.0
    encoded: Encoded | None = None
    hypotheses: list[list[Hypothesis]] | None = None
    iterations: int = 0
    domain: tuple[list[float], list[bool]] | None = None  # its images' typicality (``engine.domain``)
    guide: GuideState | None = None  # the ranker_guided hook's state, while it decodes

    @property
    def n_images(self) -> int:
        return int(self.images.shape[0])

    @property
    def rows(self) -> int:
        """Rows this request may occupy in one step call."""
        return self.params.rows(self.n_images)

    @property
    def abandoned(self) -> bool:
        """Its caller got an answer or stopped waiting, but the request has not left yet."""
        return self.future.done() and not self.status.terminal

    def timings_ms(self, rerank_ms: float) -> dict[str, float]:
        return {
            "queue": (self.encode_start - self.submitted) * 1e3,
            "encode": (self.decode_start - self.encode_start) * 1e3,
            "decode": (self.decode_end - self.decode_start) * 1e3,
            "rerank": rerank_ms,
        }
