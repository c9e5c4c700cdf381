"""``compcap bench --api-processes 1 2 --rounds K``: the split against one process, as paired rounds.

On a shared or small machine one load run of each setup is not enough to tell a 10% difference: runs of
the same setup a minute apart differ by that much. The bench therefore runs the setups in turn, round
after round (1 2 1 2 …, so that whatever else loads the machine falls on both), and compares each round's
pair: the ratio of captions/s, the latency and CPU per caption the split adds. The medians over rounds
are the figures; their ranges say how far one round can be trusted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table


def _cpu(row: dict[str, Any]) -> float | None:
    """Server CPU ms per caption over every process of the gateway (None: not measured)."""
    cpu = row.get("cpu_ms_per_caption") or {}
    return cpu.get("server")


def spread(values: Sequence[float], digits: int) -> dict[str, Any]:
    """Median and [min, max] of per-round figures."""
    return {
        "median": round(float(np.median(values)), digits),
        "range": [round(min(values), digits), round(max(values), digits)],
    }


def paired_split(load: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per gateway count, client count and API-process count above the smallest: the rounds in which
    both that count and the smallest ran, and over them the median (and range) of captions/s ratio
    (split / smallest), p50 ms added and server CPU ms per caption added, with each setup's median
    captions/s. ``load``: the bench's load rows (``round`` absent: one round). [] with one count only."""
    runs: dict[tuple[int, int], dict[int, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for row in load:
        key = (int(row.get("gateways", 1)), int(row["clients"]))
        runs[key][int(row.get("api_processes", 1))][int(row.get("round", 1))] = row
    out = []
    for (gateways, clients), by_count in sorted(runs.items()):
        base_count = min(by_count)
        base = by_count[base_count]
        for count in sorted(by_count):
            if count == base_count:
                continue
            rounds = sorted(set(base) & set(by_count[count]))
            pairs = [(base[r], by_count[count][r]) for r in rounds if base[r]["captions_per_s"]]
            if not pairs:
                continue
            entry: dict[str, Any] = {
                "gateways": gateways,
                "clients": clients,
                "api_processes": count,
                "against": base_count,
                "rounds": len(pairs),
                "captions_per_s": spread([b["captions_per_s"] for _, b in pairs], 1),
                "against_captions_per_s": spread([a["captions_per_s"] for a, _ in pairs], 1),
                "ratio": spread([b["captions_per_s"] / a["captions_per_s"] for a, b in pairs], 3),
            }
            p50 = [b["p50_ms"] - a["p50_ms"] for a, b in pairs if None not in (a["p50_ms"], b["p50_ms"])]
            if p50:
                entry["p50_ms_added"] = spread(p50, 2)
            cpu = [cb - ca for a, b in pairs if (ca := _cpu(a)) is not None and (cb := _cpu(b)) is not None]
            if cpu:
                entry["cpu_ms_per_caption_added"] = spread(cpu, 3)
            out.append(entry)
    return out


def paired_table(pairs: Sequence[dict[str, Any]]) -> Table:
    """``paired_split``'s entries as one table: medians, the range over rounds in brackets."""
    title = "compcap bench --api-processes: paired rounds (median over rounds, [min, max])"
    table = Table(title=escape(title))
    columns = ("gateways", "clients", "API procs", "rounds", "captions/s", "× against", "p50 ms added")
    for col in (*columns, "CPU ms added"):
        table.add_column(col, justify="right")

    def cell(figure: dict[str, Any] | None, fmt: str) -> str:
        if figure is None:
            return "-"
        low, high = figure["range"]
        return f"{figure['median']:{fmt}} [{low:{fmt}}, {high:{fmt}}]"

    for p in pairs:
        table.add_row(
            str(p["gateways"]),
            str(p["clients"]),
            f"{p['api_processes']} vs {p['against']}",
            str(p["rounds"]),
            f"{p['captions_per_s']['median']:.1f} vs {p['against_captions_per_s']['median']:.1f}",
            cell(p["ratio"], ".2f"),
            cell(p.get("p50_ms_added"), "+.2f"),
            cell(p.get("cpu_ms_per_caption_added"), "+.3f"),
        )
    return table


__all__ = ["paired_split", "paired_table", "spread"]
