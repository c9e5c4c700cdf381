"""The engine core's host work per step at large batches, ``python -m compcap_lab.steps.engine_profile
[--repo R] [--levels 640 1280 2560 4096] [--seconds S] [--json FILE]``.

Drives the real ``CaptionEngine`` / ``Scheduler`` on the null backend (``service.backends.null``: every
model call costs (almost) nothing) with closed-loop clients — beam 5, a quarter of them with a decoding
hook (``no_repeat_ngram`` or ``ban_words``), and one beam-100 and two beam-20 requests so that three beam
cohorts share every step call — enough of them to hold about ``level`` rows per step call
(``max_rows_per_step`` = level). After a warm-up, for ``--seconds`` s, every step's host work is
timed in sections: everything between two model calls, i.e. the scheduler's plan (expire, join =
``add_many``, admit, the rows of the call: each cohort's ``rows_from`` and their concatenation), the
runner's input building, and the update (``advance``: constraints, processors, selection, pools,
state reorder, done, observers; the finished requests' results and their leaving). The model call
itself (the backend's ``infer``) is not host work of the engine and is left out.

Sections are timed by wrapping the methods of the classes in this process only (exclusive time: a
section's own time, its wrapped callees' removed), so the engine carries no timing code and costs
nothing more when it is not profiled. Figures per level: rows per call, requests per call, host ms per
step, its parts, µs per row and per request.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

LEVELS = (640, 1280, 2560, 4096)
WIDE = (100, 20, 20)  # beam sizes of the wide clients (cohorts ≤ 32 and above)

# (owner module, class, method, section label); the label of a section is its exclusive time
SECTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("service.engine.scheduler", "Scheduler", "_plan", "plan: other"),
    ("service.engine.scheduler", "Scheduler", "_expire", "plan: expire"),
    ("service.engine.scheduler", "Scheduler", "_join", "plan: join"),
    ("service.engine.scheduler", "Scheduler", "_admit", "plan: admit"),
    ("service.engine.scheduler", "Scheduler", "_gauge", "plan: gauge"),
    ("service.engine.cohorts", "CohortBatch", "add_many", "plan: join"),
    ("service.engine.cohorts", "CohortBatch", "rows", "rows: cohorts concat"),
    ("service.engine.beam_batch", "BeamBatch", "rows_from", "rows: cohort rows_from"),
    ("service.engine.scheduler", "Scheduler", "_execute", "execute: metrics"),
    ("service.engine.runner", "ModelRunner", "step", "execute: runner inputs"),
    ("service.backends.null", "NullBackend", "infer", "MODEL"),
    ("service.engine.scheduler", "Scheduler", "_update", "update: other"),
    ("service.engine.beam_batch", "SteppedBatch", "advance", "advance: cohorts split"),
    ("service.engine.beam_batch", "BeamBatch", "advance_rows", "advance: other"),
    ("service.engine.beam_batch", "BeamBatch", "_constrain", "advance: constrain"),
    ("service.engine.beam_batch", "BeamBatch", "_process", "advance: processors"),
    ("service.engine.beam_batch", "BeamBatch", "_process_candidates", "advance: processors"),
    ("service.engine.beam_batch", "BeamBatch", "_select", "advance: selection"),
    ("service.engine.beam_batch", "BeamBatch", "_add_finished", "advance: pools/finish"),
    ("service.engine.beam_batch", "BeamBatch", "_add_live_finished", "advance: pools/finish"),
    ("service.engine.beam_batch", "BeamBatch", "_merge", "advance: pools/finish"),
    ("service.engine.beam_batch", "BeamBatch", "_reorder", "advance: state reorder"),
    ("service.engine.beam_batch", "BeamBatch", "_update_done", "advance: done"),
    ("service.engine.beam_batch", "BeamBatch", "_observe", "advance: observers"),
    ("service.engine.beam_batch", "BeamBatch", "_finished", "advance: finished"),
    ("service.engine.cohorts", "CohortBatch", "results", "update: results"),
    ("service.engine.scheduler", "Scheduler", "_leave_batch", "update: leave"),
    ("service.engine.cohorts", "CohortBatch", "discard", "update: discard"),
)


class Clock:
    """Exclusive time per label of the wrapped methods (a stack of open sections)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.on = False
        self._stack: list[list[float]] = []  # [start, time in children]

    def reset(self) -> None:
        self.total.clear()

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                # an await inside may run other sections: only the awaited backend call (MODEL) is
                # wrapped as a coroutine, and nothing else runs on the loop while it is timed
                start = time.perf_counter()
                self._stack.append([start, 0.0])
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self._close(label, start)

            return timed_async

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            self._stack.append([start, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                self._close(label, start)

        return timed

    def _close(self, label: str, start: float) -> None:
        spent = time.perf_counter() - start
        _, children = self._stack.pop()
        if self.on:
            self.total[label] += spent - children
        if self._stack:
            self._stack[-1][1] += spent


def instrument(clock: Clock) -> None:
    """Wrap every method of ``SECTIONS`` that exists (this process only)."""
    import importlib

    for module, cls_name, method, label in SECTIONS:
        cls = getattr(importlib.import_module(module), cls_name)
        fn = cls.__dict__.get(method)
        if fn is not None:
            setattr(cls, method, clock.wrap(label, fn))


async def _level(
    repo: Path, rows: int, seconds: float, warmup: float, clients: float, clock: Clock
) -> dict[str, Any]:
    from service.engine.engine import CaptionEngine
    from service.engine.runner import StepInput
    from service.metrics import Metrics

    engine = await CaptionEngine.from_repo(
        repo,
        Metrics(),  # as the gateway runs it: the step's gauges and histograms are host work too
        backend="null",
        max_rows_per_step=rows,
        max_active_requests=100_000,
        max_queue=100_000,
        request_deadline_s=600.0,
    )
    h, w = engine.manifest.image.height, engine.manifest.image.width
    image = np.zeros((1, h, w, 3), dtype=np.uint8)
    hooks: list[Any] = [None, [{"name": "no_repeat_ngram", "params": {"n": 2}}], None, None]
    hooks += [[{"name": "ban_words", "params": {"words": ["street", "grass"]}}]]
    wide = [engine.resolve(beam_size=b) for b in WIDE if sum(WIDE) < rows // 2]
    narrow_rows = rows - sum(p.beam_size for p in wide)
    narrow = [
        engine.resolve(beam_size=5, hooks=hooks[i % len(hooks)])
        for i in range(int(narrow_rows / 5 * clients))
    ]
    stop = False

    async def client(params: Any) -> None:
        while not stop:
            await engine.caption(image, params)

    tasks = [asyncio.create_task(client(p)) for p in [*wide, *narrow]]
    scheduler = engine.scheduler(engine.manifest.default_captioner)
    await asyncio.sleep(warmup)
    clock.reset()
    clock.on = True
    steps0, cpu0, wall0 = scheduler.iterations, time.process_time(), time.perf_counter()
    seen_rows, seen_requests = [], []
    runner_step = type(scheduler.runner).step

    async def counting(self: Any, captioner: str, rows: StepInput, *a: Any) -> Any:
        seen_rows.append(int(rows.image_index.shape[0]))
        seen_requests.append(len(scheduler._decoding))
        return await runner_step(self, captioner, rows, *a)

    scheduler.runner.step = counting.__get__(scheduler.runner)  # type: ignore[method-assign]
    await asyncio.sleep(seconds)
    clock.on = False
    steps, cpu, wall = scheduler.iterations - steps0, time.process_time() - cpu0, time.perf_counter() - wall0
    stop = True
    del scheduler.runner.step
    await asyncio.gather(*tasks, return_exceptions=True)
    await engine.close()
    sections = {k: v / steps * 1e3 for k, v in sorted(clock.total.items())}
    model = sections.pop("MODEL", 0.0)
    host = sum(sections.values())
    n_rows, n_req = float(np.mean(seen_rows)), float(np.mean(seen_requests))
    return {
        "level": rows,
        "steps": steps,
        "rows_per_call": n_rows,
        "requests_per_call": n_req,
        "host_ms_per_step": host,
        "model_ms_per_step": model,
        "loop_cpu_ms_per_step": cpu / steps * 1e3,
        "wall_ms_per_step": wall / steps * 1e3,
        "host_us_per_row": host / n_rows * 1e3,
        "host_us_per_request": host / n_req * 1e3,
        "sections_ms": sections,
    }


def _print(result: dict[str, Any]) -> None:
    r = result
    print(
        f"\n== level {r['level']}: {r['rows_per_call']:.0f} rows, {r['requests_per_call']:.0f} requests "
        f"per call ({r['steps']} steps)\n"
        f"host {r['host_ms_per_step']:.2f} ms/step = {r['host_us_per_row']:.2f} µs/row, "
        f"{r['host_us_per_request']:.1f} µs/request; model (null) {r['model_ms_per_step']:.2f} ms; "
        f"process CPU {r['loop_cpu_ms_per_step']:.2f} ms/step (with encode, rank, clients)"
    )
    for name, ms in sorted(r["sections_ms"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<28} {ms:8.3f} ms  {ms / r['host_ms_per_step']:6.1%}")


async def _main(args: argparse.Namespace) -> list[dict[str, Any]]:
    clock = Clock()
    instrument(clock)
    results = []
    for level in args.levels:
        result = await _level(args.repo, level, args.seconds, args.warmup, args.clients, clock)
        _print(result)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compcap_lab.steps.engine_profile", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repo", type=Path, default=Path(os.environ.get("COMPCAP_REPO", "model_repo")))
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per level")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    parser.add_argument(
        "--clients", type=float, default=5.0, help="beam-5 clients per 5 rows of the level (the rest queue)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; backend null; repo {args.repo}")
    results = asyncio.run(_main(args))
    if args.json:
        args.json.write_text(json.dumps({"cpus": os.cpu_count(), "levels": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
