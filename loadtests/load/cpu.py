"""CPU accounting for the load benches: what the gateway, the load generator and the models cost in
CPU time per caption, and the throughput that a machine's cores allow at those costs.

On a 2-core machine the load generator, the gateway's Python (HTTP, image decoding, scheduling, beam
bookkeeping) and the model calls share the same cores, so a gateway's captions/s is bounded by

    cores * 1000 / (model CPU ms per caption + any other CPU ms per caption)

whatever its design. ``cpu_bound`` is that formula; ``CpuMeter`` measures the CPU a set of processes
spent over a window (``/proc/<pid>/stat``, Linux; children not included).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.checks import at_least

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (all its threads)."""
    if pid == os.getpid():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return _stat_cpu_s(f"/proc/{pid}/stat")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (``/proc``; a gateway with ``--api-processes``: its HTTP
    processes and its engine core)."""
    from pathlib import Path

    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree.extend(frontier)
    return tree


def main_thread_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``'s main thread alone (the gateway's event loop:
    its other threads run model calls and image decoding)."""
    return _stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")


def _stat_cpu_s(path: str) -> float:
    with open(path, encoding="ascii") as f:
        stat = f.read()
    # the command name (field 2) may hold spaces: the fields after it start past the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15 of stat)


@dataclass
class CpuMeter:
    """CPU seconds each named process used between ``start()`` and ``stop()``, and the wall time.

    ``pids`` maps a name ("gateway", "client") to a pid; the bench process itself is
    ``os.getpid()``. The processes named in ``main_threads`` also have their main thread measured
    alone, reported as ``<name>_main_thread`` (part of the process's own figure, not added to it)."""

    pids: dict[str, int]
    main_threads: tuple[str, ...] = ()
    cpu_s: dict[str, float] = field(default_factory=dict)
    main_thread_cpu_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    _t0: float = 0.0
    _c0: dict[str, float] = field(default_factory=dict)
    _m0: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.pids:
            raise ValueError("pids must name at least one process")
        unknown = [name for name in self.main_threads if name not in self.pids]
        if unknown:
            raise ValueError(f"main_threads names processes not in pids: {unknown}")

    def start(self) -> None:
        self._c0 = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        self._m0 = {name: main_thread_cpu_s(self.pids[name]) for name in self.main_threads}
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = {name: process_cpu_s(pid) - self._c0[name] for name, pid in self.pids.items()}
        self.main_thread_cpu_s = {
            name: main_thread_cpu_s(self.pids[name]) - self._m0[name] for name in self.main_threads
        }

    def per_item_ms(self, items: int) -> dict[str, float]:
        """CPU ms per item (e.g. per caption) of each process, and of each measured main thread as
        ``<name>_main_thread``; {} when nothing was done."""
        if items <= 0:
            return {}
        spent = {**self.cpu_s, **{f"{n}_main_thread": s for n, s in self.main_thread_cpu_s.items()}}
        return {name: round(s / items * 1e3, 3) for name, s in spent.items()}

    def busy_share(self, cores: int | None = None) -> float:
        """The share of all cores' time the measured processes used (1.0 = every core busy)."""
        cores = cores or os.cpu_count() or 1
        return round(sum(self.cpu_s.values()) / (cores * self.wall_s), 3) if self.wall_s > 0 else 0.0

    def main_thread_busy(self) -> dict[str, float]:
        """Per process in ``main_threads``: the share of one core its main thread used."""
        if self.wall_s <= 0:
            return {}
        return {name: round(s / self.wall_s, 3) for name, s in self.main_thread_cpu_s.items()}


def cpu_bound(cores: int, cpu_ms_per_caption: Sequence[float]) -> float:
    """Captions/s that ``cores`` fully busy cores allow when each caption costs the sum of
    ``cpu_ms_per_caption`` (ms of CPU time, on any core)."""
    at_least(1, cores=cores)
    total = sum(cpu_ms_per_caption)
    if total <= 0:
        raise ValueError(f"cpu_ms_per_caption must sum to > 0, got {total}")
    return cores * 1e3 / total


def step_cpu_ms_per_row(step_curve: Sequence[dict[str, float]], rows: float) -> float:
    """CPU ms per step row at ``rows`` rows per call: the least measured at each batch size (over ORT
    thread-pool modes), linear in rows between measured sizes, clamped to the measured range.
    ``step_curve`` points carry ``rows`` and ``cpu_ms_per_call``."""
    best: dict[int, float] = {}
    for point in step_curve:
        if "cpu_ms_per_call" in point:
            r = int(point["rows"])
            best[r] = min(best.get(r, float("inf")), float(point["cpu_ms_per_call"]) / r)
    if not best:
        raise ValueError("step_curve has no cpu_ms_per_call points")
    sizes = sorted(best)
    at = min(max(rows, sizes[0]), sizes[-1])
    return float(np.interp(at, sizes, [best[r] for r in sizes]))


def model_cpu_ms_per_caption(result: dict[str, Any], mean_rows: float) -> float:
    """CPU ms of every model call one caption needs when step calls carry ``mean_rows`` rows: its
    ``rows_per_caption`` step rows plus the encoder, init and ranker calls at large batches (a
    ``compcap bench`` result)."""
    other = result["compute_limit"]["cpu_ms_per_caption_other"]
    return result["rows_per_caption"] * step_cpu_ms_per_row(result["step_curve"], mean_rows) + sum(
        other.values()
    )


def bounds_of_limit(result: dict[str, Any], row: dict[str, Any]) -> dict[str, float]:
    """For one load level of a ``compcap bench`` result: the share of the step-only limit that the
    cores allow (a) to any server at all, when the load generator's CPU per caption (measured) runs
    on the same cores, and (b) to a server that does the HTTP floor's work per request
    (``result["floor"]``, when measured) and nothing else but the model calls."""
    limit = result["limit"]["ideal_captions_per_s"]
    cores = int(result["cpu_count"])
    model = model_cpu_ms_per_caption(result, row["mean_rows_per_call"])
    out = {"model_cpu_ms_per_caption": round(model, 3)}
    measured = row.get("cpu_ms_per_caption") or {}
    if "client" in measured:
        out["any_server"] = round(cpu_bound(cores, [model, measured["client"]]) / limit, 3)
    floor = (result.get("floor") or {}).get("cpu_ms_per_caption") or {}
    if floor:  # its processes only: a ``*_main_thread`` figure is part of its process's, not added
        spent = [ms for name, ms in floor.items() if not name.endswith("_main_thread")]
        out["http_floor"] = round(cpu_bound(cores, [model, *spent]) / limit, 3)
    return out


__all__ = [
    "CpuMeter",
    "bounds_of_limit",
    "cpu_bound",
    "main_thread_cpu_s",
    "model_cpu_ms_per_caption",
    "process_cpu_s",
    "step_cpu_ms_per_row",
]
