"""Shadow comparison on live traffic (``COMPCAP_SHADOW_MODEL``, ``COMPCAP_SHADOW_RATE``).

A sampled share of caption requests is decoded again by the shadow configuration, after the user's
response has been sent, at background priority (the scheduler's background budget and pacing keep it
out of the users' way). The NGSM of the primary's best caption against the shadow's goes into
``compcap_shadow_similarity{primary, shadow}``; a reservoir keeps the most discrepant images seen — a
thumbnail (or, when enabled, the decoded model-size image) and both captions — served at
``GET /v1/compare/shadow``: in the gateway the shared state's ``StoredReservoir``, one for every
replica; an in-memory ``DiscrepancyReservoir`` when none is given. At most ``max_pending`` shadow
decodes wait or run at once; a sampled request beyond that is skipped and counted
(``compcap_shadow_requests_total{outcome="busy"}``), so a shadow can never build a backlog. Nothing
of this touches the user's request once it is handed over."""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image
from prometheus_client import CollectorRegistry, Counter, Histogram

from service.checks import at_least, within
from service.compare.configs import Configuration
from service.compare.ngsm import ngsm_profile
from service.compare.reservoir import DiscrepancyReservoir, ReservoirItem
from service.engine.client import EngineClient
from service.engine.engine import CaptionOutput
from service.engine.params import SearchParams
from service.engine.request import Priority

log = logging.getLogger("compcap.shadow")
SIMILARITY_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.999, 1.0)
THUMBNAIL_PX = 64
SHADOW_TIMEOUT_S = 120.0  # a shadow decode waits behind users; past this it is given up (outcome=failed)
# metric names (the load tests read /metrics by them); the counter's samples are SHADOW_REQUESTS + "_total"
SHADOW_SIMILARITY = "compcap_shadow_similarity"
SHADOW_REQUESTS = "compcap_shadow_requests"


def png_base64(image: np.ndarray, max_side: int | None) -> str:
    """uint8 [H, W, 3] → base64 PNG, shrunk so its longer side is at most ``max_side`` (None: as is)."""
    pil = Image.fromarray(image)
    if max_side is not None and max(pil.size) > max_side:
        pil.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    pil.save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode("ascii")


class Reservoir(Protocol):
    capacity: int
    max_bytes: int

    def add(self, item: ReservoirItem) -> bool: ...

    def would_refuse(self, similarity: float, tie_break: float) -> bool: ...

    def note_refused(self) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


class ShadowComparer:
    """See module docstring. ``offer`` is called by the caption route once the response is out."""

    def __init__(
        self,
        config: Configuration,
        rate: float,
        registry: CollectorRegistry,
        capacity: int = 20,
        max_bytes: int = 1 << 20,
        keep_images: bool = False,
        max_pending: int = 4,
        seed: int | None = None,
        reservoir: Reservoir | None = None,
    ) -> None:
        within(0, 1, rate=rate)
        at_least(1, max_pending=max_pending)
        self.config, self.rate, self.keep_images, self.max_pending = config, rate, keep_images, max_pending
        self.reservoir: Reservoir = reservoir or DiscrepancyReservoir(capacity, max_bytes)
        self._keeping = threading.Lock()  # _keep runs in worker threads; the reservoir takes one at a time
        self._random = random.Random(seed)
        self._params: SearchParams | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.similarity = Histogram(
            SHADOW_SIMILARITY,
            "NGSM (Wan et al., 2022, Eq. 4) of the primary's best caption against the shadow configuration's",
            ["primary", "shadow"],
            buckets=SIMILARITY_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            SHADOW_REQUESTS,
            "Caption requests offered to the shadow: compared, busy (skipped, max_pending reached), "
            "failed (the shadow decode failed or timed out), unsampled",
            ["primary", "shadow", "outcome"],
            registry=registry,
        )

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def offer(
        self,
        engine: EngineClient,
        images: np.ndarray,
        primary_model: str,
        primary_captions: Sequence[str],
        on_done: Callable[[], object] | None = None,
    ) -> bool:
        """Sample this request; if chosen and a slot is free, start its shadow decode. True when started."""
        labels = {"primary": primary_model, "shadow": self.config.name}
        if self.rate <= 0.0 or self._random.random() >= self.rate:
            self.requests.labels(**labels, outcome="unsampled").inc()
            return False
        if len(self._tasks) >= self.max_pending:
            self.requests.labels(**labels, outcome="busy").inc()
            return False
        task = asyncio.create_task(self._compare(engine, images, primary_model, list(primary_captions)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if on_done is not None:
            task.add_done_callback(lambda _: on_done())
        return True

    async def offer_output(self, engine: EngineClient, images: np.ndarray, out: CaptionOutput) -> bool:
        """``offer`` for a finished caption request: its model and each image's best caption (a
        coroutine, so that a response's background task runs it on the event loop)."""
        best = [per[0].text if per else "" for per in out.results]
        return self.offer(engine, images, out.params.model, best)

    async def _compare(
        self, engine: EngineClient, images: np.ndarray, primary_model: str, primary: list[str]
    ) -> None:
        labels = {"primary": primary_model, "shadow": self.config.name}
        try:
            if self._params is None:
                self._params = engine.resolve(**self.config.options)
            out = await engine.caption(
                images, self._params, timeout_s=SHADOW_TIMEOUT_S, priority=Priority.BACKGROUND
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the shadow must never surface to users; it is counted and logged
            self.requests.labels(**labels, outcome="failed").inc()
            log.warning("shadow decode failed: %s: %s", type(exc).__name__, exc)
            return
        for image, first, per in zip(images, primary, out.results, strict=True):
            second = per[0].text if per else ""
            similarity, tie = ngsm_profile(first, second)
            self.similarity.labels(**labels).observe(similarity)
            try:
                await asyncio.to_thread(self._keep, image, primary_model, first, second, similarity, tie)
            except Exception as exc:  # a reservoir that is away loses this item, not the comparison
                log.warning("shadow reservoir: item not kept: %s: %s", type(exc).__name__, exc)
        self.requests.labels(**labels, outcome="compared").inc()

    def _keep(
        self, image: np.ndarray, primary_model: str, first: str, second: str, similarity: float, tie: float
    ) -> None:
        with self._keeping:
            if self.reservoir.would_refuse(similarity, tie):
                self.reservoir.note_refused()
                return  # skip the PNG encoding of an image that would not be kept
            png = png_base64(image, None if self.keep_images else THUMBNAIL_PX)
            payload = {
                "similarity": round(similarity, 6),
                "primary": {"model": primary_model, "caption": first},
                "shadow": {"configuration": self.config.name, "caption": second},
                "image_png": png,
                "image_kind": "model_input" if self.keep_images else f"thumbnail_{THUMBNAIL_PX}px",
                "seen_at": time.time(),
            }
            size = len(png) + len(first.encode()) + len(second.encode())
            self.reservoir.add(ReservoirItem(similarity, tie, payload, size))

    async def snapshot(self) -> dict[str, Any]:
        """The reservoir, most discrepant first, with its bounds and counters."""
        kept = await asyncio.to_thread(self.reservoir.snapshot)
        return {
            "shadow": self.config.to_json(),
            "rate": self.rate,
            "capacity": kept["capacity"],
            "max_bytes": kept["max_bytes"],
            "bytes": kept["bytes"],
            "seen": kept["seen"],
            "pending": self.pending,
            "items": kept["items"],
        }

    async def drain(self) -> None:
        """Wait for the shadow decodes under way (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


__all__ = ["ShadowComparer", "png_base64"]
