"""``compcap bench --baseline transformers --rounds K``: an imported captioner through CompCap against what
its user would run without it, in paired rounds.

The setups, each at every client count of ``--clients``: CompCap's gateway (HTTP, closed loop); the
per-request transformers server (``loadtests.peers.transformers_baseline``: ``generate`` one image at a
time behind a FastAPI route, what a per-request server computes); ``generate`` batched offline, as many
images per call as there are clients (``loadtests.peers.batched``: the figure a user gets offline with no
server at all); and, where its virtual environment exists (``make optimum-venv``), Optimum's ONNX Runtime
model batched the same way. They run in turn, round after round (A B C A B C …: whatever else loads a
shared machine falls on all of them), and each round's CompCap figure is compared with that round's peer
figures: the median ratio over rounds, with its range, is the result. Each setup's cores used and peak
memory per process are kept beside its captions/s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadtests.bench.paired import spread
from loadtests.load.cpu import process_tree
from loadtests.load.http_load import Gateway, closed_loop

console = Console(stderr=True)
OPTIMUM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-optimum" / "bin" / "python"  # make optimum-venv
COMPCAP = "compcap"
PER_REQUEST = "transformers per request"
BATCHED = "generate batched"
OPTIMUM = "optimum batched"


def peak_mb(pids: Sequence[int]) -> float:
    """The peak resident memory (``VmHWM``) of each of ``pids``, summed, MB (0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def _http_levels(
    name: str,
    server: Gateway,
    pngs: list[bytes],
    query: dict[str, str],
    clients: Sequence[int],
    seconds: float,
    step_model: str | None,
) -> list[dict[str, Any]]:
    pids = process_tree(server.process.pid)
    asyncio.run(closed_loop(server.url, pngs, query, 1, min(5.0, seconds), None))  # first requests: warm-up
    rows = []
    for n in clients:
        console.print(f"[bold]{name}[/]: {n} clients for {seconds:.0f} s")
        row = asyncio.run(closed_loop(server.url, pngs, query, n, seconds, step_model, pids))
        rows.append(
            {"setup": name, **row, "cores_used": row.get("server_cores_used"), "peak_mb": peak_mb(pids)}
        )
    return rows


def _offline(
    name: str,
    python: Path | str,
    snapshot: Path,
    clients: Sequence[int],
    seconds: float,
    images: Path,
    onnx: Path | None = None,
) -> list[dict[str, Any]]:
    """``loadtests.peers.batched`` in a process of its own per client count (batch = clients)."""
    rows = []
    for n in clients:
        console.print(f"[bold]{name}[/]: batches of {n} for {seconds:.0f} s")
        command = [
            str(python),
            "-m",
            "loadtests.peers.batched",
            "--snapshot",
            str(snapshot),
            "--batch",
            str(n),
        ]
        command += ["--seconds", str(seconds), "--images", str(images)]
        if onnx is not None:
            command += ["--runtime", "optimum", "--onnx", str(onnx)]
        env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "setup": name,
                "clients": n,
                "captions_per_s": out["captions_per_s"],
                "cores_used": out["cores_used"],
                "peak_mb": out["peak_rss_mb"],
            }
        )
    return rows


def optimum_export(snapshot: Path, out: Path) -> Path:
    """The snapshot exported by ``optimum-cli export onnx --task image-to-text-with-past`` in the Optimum
    environment (what ``ORTModelForVision2Seq`` loads), into ``out``."""
    command = [
        str(OPTIMUM_PYTHON.parent / "optimum-cli"), "export", "onnx", "--model", str(snapshot),
        "--task", "image-to-text-with-past", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"optimum-cli export failed ({done.returncode}): {done.stderr[-2000:]}")
    for name in ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (snapshot / name).is_file() and not (out / name).exists():
            (out / name).write_bytes((snapshot / name).read_bytes())
    return out


def peer_rounds(args: Any, plan: Any, env: dict[str, str]) -> dict[str, Any]:
    """The rounds (module docstring); the result's ``rows`` (every setup, round and client count) and
    ``pairs`` (``paired_peers``)."""
    snapshot = Path(args.snapshot)
    optimum = OPTIMUM_PYTHON.is_file() and not getattr(args, "no_optimum", False)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="compcap-peers-")))
        images = folder / "images.npy"  # the gateway's images, for the offline peers
        np.save(images, plan.images)
        onnx, optimum_note = None, "" if optimum else "no environment (make optimum-venv) or --no-optimum"
        if optimum:
            console.print("[bold]optimum[/]: exporting the snapshot (optimum-cli export onnx)")
            try:
                onnx = optimum_export(snapshot, folder / "onnx")
            except RuntimeError as exc:  # e.g. BLIP: Optimum exports no such architecture
                optimum_note = f"left out: {exc}"[:500]
                console.print(f"[yellow]optimum[/]: {optimum_note}")
        peer = ["loadtests.peers.transformers_baseline", "--snapshot", str(snapshot)]
        for round_ in range(1, args.rounds + 1):
            console.print(f"[bold]round {round_} of {args.rounds}[/]")
            found: list[dict[str, Any]] = []
            with Gateway(plan.repo, env) as gateway:
                found += _http_levels(
                    COMPCAP, gateway, plan.pngs, plan.query, args.clients, args.duration, plan.step_model
                )
            with Gateway(plan.repo, {}, module=peer, ready="/health") as server:
                found += _http_levels(
                    PER_REQUEST, server, plan.pngs, plan.query, args.clients, args.duration, None
                )
            found += _offline(BATCHED, sys.executable, snapshot, args.clients, args.duration, images)
            if onnx is not None:
                found += _offline(
                    OPTIMUM, OPTIMUM_PYTHON, snapshot, args.clients, args.duration, images, onnx
                )
            rows += [{**row, "round": round_} for row in found]
    return {
        "rows": rows,
        "pairs": paired_peers(rows),
        "optimum": onnx is not None,
        "optimum_note": optimum_note,
    }


def paired_peers(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per client count and peer: the rounds in which both CompCap and the peer ran, and over them the
    median (and range) of CompCap's captions/s over the peer's, with each one's median captions/s, cores
    used and peak memory. Pure."""
    by: dict[tuple[int, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by[(int(row["clients"]), row["setup"])][int(row.get("round", 1))] = row
    out = []
    for clients in sorted({c for c, _ in by}):
        ours = by.get((clients, COMPCAP), {})
        for setup in (PER_REQUEST, BATCHED, OPTIMUM):
            theirs = by.get((clients, setup), {})
            rounds = sorted(r for r in set(ours) & set(theirs) if theirs[r]["captions_per_s"])
            if not rounds:
                continue
            mine = [ours[r] for r in rounds]
            peer = [theirs[r] for r in rounds]
            entry: dict[str, Any] = {
                "clients": clients,
                "peer": setup,
                "rounds": len(rounds),
                "ratio": spread(
                    [a["captions_per_s"] / b["captions_per_s"] for a, b in zip(mine, peer, strict=True)], 3
                ),
                "captions_per_s": spread([a["captions_per_s"] for a in mine], 3),
                "peer_captions_per_s": spread([b["captions_per_s"] for b in peer], 3),
                "per_round": [
                    {"round": r, "compcap": a["captions_per_s"], "peer": b["captions_per_s"]}
                    for r, a, b in zip(rounds, mine, peer, strict=True)
                ],
            }
            for key in ("cores_used", "peak_mb"):
                for side, values in (("", mine), ("peer_", peer)):
                    found = [float(v[key]) for v in values if v.get(key) is not None]
                    if found:
                        entry[f"{side}{key}"] = round(float(np.median(found)), 2)
            p50 = [a["p50_ms"] for a in mine if a.get("p50_ms") is not None]
            if p50:
                entry["p50_ms"] = round(float(np.median(p50)), 1)
            out.append(entry)
    return out


def peers_table(pairs: Sequence[dict[str, Any]]) -> Table:
    """``paired_peers``' entries as one table: medians over rounds, the ratio's range in brackets."""
    table = Table(title=escape("compcap bench --baseline transformers: paired rounds (median, [min, max])"))
    columns = ("clients", "peer", "rounds", "CompCap captions/s", "peer captions/s", "CompCap / peer")
    for col in (*columns, "cores used (CompCap, peer)", "peak MB (CompCap, peer)", "CompCap p50 ms"):
        table.add_column(col, justify="right")
    for p in pairs:
        low, high = p["ratio"]["range"]
        table.add_row(
            str(p["clients"]),
            p["peer"],
            str(p["rounds"]),
            f"{p['captions_per_s']['median']:.2f}",
            f"{p['peer_captions_per_s']['median']:.2f}",
            f"{p['ratio']['median']:.2f} [{low:.2f}, {high:.2f}]",
            f"{p.get('cores_used', 0):.2f}, {p.get('peer_cores_used', 0):.2f}",
            f"{p.get('peak_mb', 0):.0f}, {p.get('peer_peak_mb', 0):.0f}",
            f"{p['p50_ms']:.0f}" if "p50_ms" in p else "-",
        )
    return table


__all__ = ["optimum_export", "paired_peers", "peak_mb", "peer_rounds", "peers_table"]
