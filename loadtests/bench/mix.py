"""``compcap bench --mix``: do the beam-5 users keep their throughput next to other kinds of traffic?

One gateway (``compcap serve`` on a free port), then scenarios of ``--seconds`` s each, every scenario
a set of closed-loop client kinds running at once:

- ``alone``: ``--mix-users`` beam-5 clients (24), the reference;
- ``wide``: the same plus 2 clients asking ``beam_size=100&n_best=5``;
- ``hang-up``: the same plus 4 clients sending 4-image beam-20 requests and closing the connection
  50 ms after sending (an abandoned request must stop costing work at once), from their own
  loopback address (``--hang-up-source``, 127.0.0.2: another client, as in production);
- ``junk``: the same plus 2 clients sending uploads that are not images (fast 4xx);
- ``rows``/``rows+100``: ``--rows-users`` beam-5 clients (32) alone, then with one beam-100 client; the
  total step rows/s of the two are compared (a wide request must not slow everyone's steps).

With ``--mix-repeat N`` the whole list runs N times, interleaved (A B C D A B C D …), so drift of a
shared machine hits every scenario alike; each figure is reported as the median and the spread
(max − min) over the rounds, and each ratio against ``alone`` (or ``rows``) is taken within a round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from loadtests.load.cpu import CpuMeter
from loadtests.load.http_load import BOUNDARY, Gateway, RawConnection, request_head, samples, step_rows
from loadtests.load.inputs import bench_images, png_bytes
from loadtests.load.results import run_and_save
from service.checks import above, at_least
from service.cli import blocks
from service.cli.args import positive_int
from service.manifest import load_manifest
from service.metrics import ABANDONED, PACED_ABANDONERS

console = Console(stderr=True)
JUNK = b"this is not an image" * 8


@dataclass(frozen=True)
class Traffic:
    """One kind of closed-loop client: ``clients`` of them, each sending its next request when the last
    is answered (or, with ``hang_up_s``, when it closed the connection that long after sending)."""

    name: str
    clients: int
    query: dict[str, str]
    images: int = 1  # images per request
    hang_up_s: float | None = None
    junk: bool = False
    source: str | None = None  # local address to connect from (None: the system's choice)

    def __post_init__(self) -> None:
        at_least(1, clients=self.clients, images=self.images)
        if self.hang_up_s is not None:
            above(0, hang_up_s=self.hang_up_s)


@dataclass(frozen=True)
class Scenario:
    name: str
    traffic: tuple[Traffic, ...]
    reference: str  # the scenario this one's users are compared with


def scenarios(model: str, users: int, rows_users: int, hang_up_source: str | None = None) -> list[Scenario]:
    """The mix scenarios (module docstring); ``traffic[0]`` is always the beam-5 users. The hang-up
    clients connect from ``hang_up_source`` (None: the users' address)."""
    beam5 = {"model": model, "beam_size": "5"}

    def u(n: int) -> Traffic:
        return Traffic("users", n, beam5)

    return [
        Scenario("alone", (u(users),), "alone"),
        Scenario(
            "wide", (u(users), Traffic("beam-100", 2, {**beam5, "beam_size": "100", "n_best": "5"})), "alone"
        ),
        Scenario(
            "hang-up",
            (
                u(users),
                Traffic(
                    "hang-up",
                    4,
                    {**beam5, "beam_size": "20"},
                    images=4,
                    hang_up_s=0.05,
                    source=hang_up_source,
                ),
            ),
            "alone",
        ),
        Scenario("junk", (u(users), Traffic("junk", 2, beam5, junk=True)), "alone"),
        Scenario("rows", (u(rows_users),), "rows"),
        Scenario("rows+100", (u(rows_users), Traffic("beam-100", 1, {**beam5, "beam_size": "100"})), "rows"),
    ]


def multipart(parts: list[bytes]) -> bytes:
    """A multipart/form-data body with one ``image`` field per part."""
    out = b""
    for part in parts:
        out += (
            (
                f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="x.png"\r\n'
                "Content-Type: image/png\r\n\r\n"
            ).encode()
            + part
            + b"\r\n"
        )
    return out + f"--{BOUNDARY}--\r\n".encode()


@dataclass
class Tally:
    """What one kind of client saw in one scenario."""

    sent: int = 0
    received: int = 0
    hung_up: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)  # of 200 answers

    def summary(self, elapsed: float) -> dict[str, Any]:
        lat = self.latencies_ms
        return {
            "sent": self.sent,
            "received": self.received,
            "hung_up": self.hung_up,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "answers_per_s": round(self.statuses[200] / elapsed, 2),
            "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat else None,
        }


async def _hang_up_once(
    host: str, port: int, head: bytes, body: bytes, after_s: float, tally: Tally, source: str | None
) -> None:
    """Send one request on a new connection (from ``source``) and close it ``after_s`` after sending
    (unless answered)."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
    try:
        writer.write(head + body)
        await writer.drain()
        try:
            header = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), after_s)
        except TimeoutError:
            tally.hung_up += 1
            return
        tally.received += 1
        tally.statuses[int(header.split()[1])] += 1
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _client(url: str, kind: Traffic, bodies: list[bytes], k: int, stop: float, tally: Tally) -> None:
    u = httpx.URL(url)
    host, port = u.host, int(u.port or 80)
    target = "/v1/captions?" + urlencode(kind.query)
    connection = RawConnection(host, port)
    i = k
    try:
        while time.perf_counter() < stop:
            body = bodies[i % len(bodies)]
            i += kind.clients
            tally.sent += 1
            if kind.hang_up_s is not None:
                head = request_head(host, port, target, len(body))
                try:
                    await _hang_up_once(host, port, head, body, kind.hang_up_s, tally, kind.source)
                except (OSError, asyncio.IncompleteReadError):
                    tally.statuses[-1] += 1
                continue
            start = time.perf_counter()
            try:
                status, _ = await connection.post(target, body)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                tally.statuses[-1] += 1  # -1: the connection failed
                await connection.close()
                continue
            tally.received += 1
            tally.statuses[status] += 1
            if status == 200:
                tally.latencies_ms.append((time.perf_counter() - start) * 1e3)
    finally:
        await connection.close()


async def run_scenario(
    url: str,
    scenario: Scenario,
    pngs: list[bytes],
    duration: float,
    step_model: str,
    server_pid: int | None = None,
) -> dict[str, Any]:
    """Every client kind of ``scenario`` at once for ``duration`` s; per kind its tally, the step
    rows/s over the whole scenario from the gateway's /metrics, and the CPU cores the gateway
    (``server_pid``) and this load generator used (they share the machine's cores)."""
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        text = (await client.get("/metrics")).text
        before, before_abandoned = step_rows(text, step_model), abandoned_by_stage(text)
    tallies = {kind.name: Tally() for kind in scenario.traffic}
    meter = CpuMeter({"generator": os.getpid(), **({"gateway": server_pid} if server_pid else {})})
    meter.start()
    stop = time.perf_counter() + duration
    start = time.perf_counter()
    tasks = []
    for kind in scenario.traffic:
        if kind.junk:
            bodies = [multipart([JUNK])]
        else:
            bodies = [
                multipart([pngs[(j + n) % len(pngs)] for n in range(kind.images)]) for j in range(len(pngs))
            ]
        tasks += [_client(url, kind, bodies, k, stop, tallies[kind.name]) for k in range(kind.clients)]
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    meter.stop()
    cores = {name: round(cpu / meter.wall_s, 2) for name, cpu in meter.cpu_s.items()}
    await asyncio.sleep(0.5)  # let abandoned work drain out of the metrics window of the next scenario
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        text = (await client.get("/metrics")).text
        after, after_abandoned = step_rows(text, step_model), abandoned_by_stage(text)
    users = tallies[scenario.traffic[0].name]
    abandoned = {stage: after_abandoned.get(stage, 0.0) - n for stage, n in before_abandoned.items()}
    abandoned.update({s: n for s, n in after_abandoned.items() if s not in before_abandoned})
    return {
        "scenario": scenario.name,
        "elapsed_s": round(elapsed, 2),
        "users_captions_per_s": round(users.statuses[200] / elapsed, 2),
        "users_p50_ms": users.summary(elapsed)["p50_ms"],
        "step_rows_per_s": round((after[0] - before[0]) / elapsed, 1),
        "step_calls": int(after[1] - before[1]),
        "traffic": {name: t.summary(elapsed) for name, t in tallies.items()},
        "errors_5xx": sum(n for t in tallies.values() for s, n in t.statuses.items() if s >= 500),
        "lost": sum(t.sent - t.received - t.hung_up for t in tallies.values()),
        "abandoned_by_stage": {k: int(v) for k, v in sorted(abandoned.items()) if v},
        "generator_cores": cores["generator"],  # CPU seconds per second of this load generator
        "gateway_cores": cores.get("gateway"),
    }


def abandoned_by_stage(metrics_text: str) -> dict[str, float]:
    """The gateway's abandoned-requests counter (``compcap_abandoned_requests_total``) summed by stage
    (waiting, encoding, decoding, ranking), and as ``paced`` the requests held back before any work by
    abandon pacing (``compcap_paced_abandoner_requests_total``)."""
    out: dict[str, float] = {}
    for sample in samples(metrics_text, f"{ABANDONED}_total"):
        if stage := sample.labels.get("stage"):
            out[stage] = out.get(stage, 0.0) + sample.value
    for sample in samples(metrics_text, f"{PACED_ABANDONERS}_total"):
        out["paced"] = sample.value
    return out


def mix_ratios(rounds: list[dict[str, dict[str, Any]]], chosen: list[Scenario]) -> dict[str, dict[str, Any]]:
    """Per scenario: the median and spread over rounds of the users' captions/s, p50 and step rows/s,
    and of the within-round ratios to the scenario's reference."""
    out: dict[str, dict[str, Any]] = {}
    for s in chosen:
        per = [r[s.name] for r in rounds]
        ratio = [
            r[s.name]["users_captions_per_s"] / max(r[s.reference]["users_captions_per_s"], 1e-9)
            for r in rounds
        ]
        rows_ratio = [
            r[s.name]["step_rows_per_s"] / max(r[s.reference]["step_rows_per_s"], 1e-9) for r in rounds
        ]
        out[s.name] = {
            "reference": s.reference,
            **{
                key: _median_spread([p[key] for p in per if p.get(key) is not None])
                for key in (
                    "users_captions_per_s",
                    "users_p50_ms",
                    "step_rows_per_s",
                    "gateway_cores",
                    "generator_cores",
                )
            },
            "users_ratio": _median_spread(ratio),
            "step_rows_ratio": _median_spread(rows_ratio),
            "errors_5xx": sum(p["errors_5xx"] for p in per),
            "lost": sum(p["lost"] for p in per),
        }
    return out


def _median_spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "spread": None}
    return {"median": round(statistics.median(values), 3), "spread": round(max(values) - min(values), 3)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = Path(args.repo)
    manifest = load_manifest(repo)
    cap = manifest.captioner(args.model or manifest.default_captioner)
    every = scenarios(cap.name, args.mix_users, args.rows_users, args.hang_up_source or None)
    chosen_names = (
        args.mix_scenarios.split(",") if isinstance(args.mix_scenarios, str) else args.mix_scenarios
    )
    wanted = [s.strip() for s in chosen_names or () if s.strip()]
    unknown = set(wanted) - {s.name for s in every}
    if unknown:
        raise SystemExit(f"--mix-scenarios: unknown {sorted(unknown)}; known: {[s.name for s in every]}")
    chosen = [s for s in every if not wanted or s.name in wanted]
    for s in chosen:  # a scenario's reference always runs with it
        if s.reference not in {c.name for c in chosen}:
            chosen.insert(0, next(e for e in every if e.name == s.reference))
    images = bench_images(args.images, manifest.image.height, manifest.image.width)
    pngs = [png_bytes(x) for x in images]
    env = {"COMPCAP_BACKEND": args.backend, "COMPCAP_MAX_QUEUE": "1024", "COMPCAP_STATE_URL": ""}
    if args.triton_url:
        env["COMPCAP_TRITON_URL"] = args.triton_url
    rounds: list[dict[str, dict[str, Any]]] = []
    with Gateway(repo, env) as gateway:
        asyncio.run(run_scenario(gateway.url, chosen[0], pngs, 3.0, cap.step))  # warm-up
        for n in range(args.mix_repeat):
            done: dict[str, dict[str, Any]] = {}
            for s in chosen:
                console.print(f"[bold]round {n + 1}/{args.mix_repeat}[/]: {s.name} for {args.duration:.0f} s")
                done[s.name] = asyncio.run(
                    run_scenario(gateway.url, s, pngs, args.duration, cap.step, gateway.process.pid)
                )
            rounds.append(done)
    return {
        "backend": args.backend,
        "model": cap.name,
        "duration_s": args.duration,
        "scenarios": {s.name: [t.__dict__ for t in s.traffic] for s in chosen},
        "summary": mix_ratios(rounds, chosen),
        "rounds": rounds,
    }


def mix_table(result: dict[str, Any]) -> Table:
    table = Table(title=f"compcap bench --mix — {result['backend']}, {result['model']}", width=150)
    for col in (
        "scenario",
        "users cap/s",
        "× ref",
        "users p50 ms",
        "step rows/s",
        "rows × ref",
        "cores: gateway / generator",
        "5xx",
        "lost",
    ):
        table.add_column(col, justify="right")

    def fmt(v: dict[str, float | None], pct: bool = False, digits: int = 1) -> str:
        if v["median"] is None:
            return "—"
        if pct:
            return f"{100 * v['median']:.0f}% ±{100 * (v['spread'] or 0) / 2:.0f}"
        return f"{v['median']:.{digits}f} ±{(v['spread'] or 0) / 2:.{digits}f}"

    for name, s in result["summary"].items():
        table.add_row(
            name,
            fmt(s["users_captions_per_s"]),
            fmt(s["users_ratio"], pct=True) + f" of {s['reference']}",
            fmt(s["users_p50_ms"]),
            fmt(s["step_rows_per_s"]),
            fmt(s["step_rows_ratio"], pct=True),
            f"{fmt(s['gateway_cores'], digits=2)} / {fmt(s['generator_cores'], digits=2)}",
            str(s["errors_5xx"]),
            str(s["lost"]),
        )
    table.caption = "median ± half the spread over rounds; ratios taken within a round"
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mix", action="store_true", help="run the mixed-traffic scenarios instead")
    parser.add_argument(
        "--mix-users", type=positive_int, default=24, help="beam-5 clients in the mix scenarios"
    )
    parser.add_argument(
        "--rows-users", type=positive_int, default=32, help="beam-5 clients in rows / rows+100"
    )
    parser.add_argument(
        "--mix-repeat", type=positive_int, default=1, help="rounds of every scenario, interleaved"
    )
    blocks.value_list(parser, "--mix-scenarios", "SCENARIO", "a subset (default: all)", default=())
    parser.add_argument(
        "--hang-up-source",
        default="127.0.0.2",
        help="local address the hang-up clients connect from: another client than the users, as it "
        "would be in production ('' = the users' own address)",
    )


def mix(args: argparse.Namespace) -> int:
    return run_and_save(args, run, mix_table)
