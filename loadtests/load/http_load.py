"""Closed-loop HTTP load on a caption server: a server in a subprocess on a free port (``Gateway``),
a cheap keep-alive HTTP client (``RawConnection``) and ``closed_loop``, which every load bench uses
(``compcap bench``, ``--mix``, ``--profile``, the probe and shadow loads)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from loadtests.load.cpu import CpuMeter
from service.metrics import BEAM_ROWS, MODEL_CALL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway(AbstractContextManager["Gateway"]):
    """``compcap serve`` (or ``module``, another server taking ``--repo`` and ``--port``) in a
    subprocess on a free port, terminated on exit; ready when ``ready`` answers 200. ``cwd``: the
    folder it starts in, whose ``service`` package it imports (another commit's checkout, for A/B)."""

    def __init__(
        self,
        repo: Path,
        env: dict[str, str],
        module: Sequence[str] = ("service.cli", "serve"),
        ready: str = "/readyz",
        cwd: str | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready, self.name = ready, " ".join(module)
        # its output, kept for the reason a server that exits before it is ready gives
        self.log = tempfile.TemporaryFile("w+", errors="replace")  # noqa: SIM115 - closed in __exit__
        cmd = [sys.executable, "-m", *module, "--repo", str(repo), "--port", str(self.port)]
        self.process = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd
        )

    def __enter__(self) -> Gateway:
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self._tail()}")
            try:
                if httpx.get(f"{self.url}{self.ready}", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not become ready in 120 s: {self._tail()}")

    def _tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines the server printed, joined by " / "."""
        self.log.flush()
        self.log.seek(0)
        return " / ".join(self.log.read().strip().splitlines()[-lines:]) or "(it printed nothing)"

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def samples(metrics_text: str, name: str) -> Iterator[Sample]:
    """The samples called ``name`` in a Prometheus exposition (``BEAM_ROWS + "_sum"``, ``ABANDONED +
    "_total"``: a counter's family drops the ``_total`` its samples carry), parsed by prometheus_client."""
    for family in text_string_to_metric_families(metrics_text):
        yield from (sample for sample in family.samples if sample.name == name)


def histogram_totals(metrics_text: str, histogram: str, model: str) -> tuple[float, float]:
    """(sum, count) of the gateway's ``histogram`` (a Prometheus name) for ``model``; (0, 0) if absent."""
    values = {}
    for kind in ("sum", "count"):
        found = samples(metrics_text, f"{histogram}_{kind}")
        values[kind] = sum((s.value for s in found if s.labels.get("model") == model), 0.0)
    return values["sum"], values["count"]


def step_rows(metrics_text: str, step_model: str) -> tuple[float, float]:
    """(sum, count) of the gateway's rows-per-decoder-call histogram for ``step_model``."""
    return histogram_totals(metrics_text, BEAM_ROWS, step_model)


def step_call_seconds(metrics_text: str, step_model: str) -> tuple[float, float]:
    """(sum, count) of the gateway's model-call time histogram for ``step_model`` (wall time of each
    step call, as the server saw it under load)."""
    return histogram_totals(metrics_text, MODEL_CALL, step_model)


BOUNDARY = "compcapbench7f3a"


def multipart_body(png: bytes) -> bytes:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="x.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()
    return head + png + f"\r\n--{BOUNDARY}--\r\n".encode()


def request_head(host: str, port: int, target: str, length: int) -> bytes:
    """The head of a multipart POST of ``length`` body bytes (``multipart_body``'s boundary)."""
    return (
        f"POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: the load generator shares the 2
    cores with the gateway, so it must cost as little CPU per request as possible (httpx costs ~1 ms)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, target: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None and self.writer is not None
        self.writer.write(request_head(self.host, self.port, target, len(body)) + body)
        await self.writer.drain()
        header = await self.reader.readuntil(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.writer = None


async def closed_loop(
    url: str | Sequence[str],
    pngs: list[bytes],
    query: dict[str, str],
    clients: int,
    duration: float,
    step_model: str | None,
    pid: int | Sequence[int] | None = None,
) -> dict[str, Any]:
    """``clients`` closed-loop clients, each sending its next request when the last one is answered,
    for ``duration`` s; every request sent is waited for (sent must equal received). With the
    server's ``pid``, also the CPU ms per caption of the server and of this load generator, and the
    cores the server kept busy (``server_cores_used``). With a ``step_model``, also its rows per call
    and wall ms per call in the server (from its ``/metrics``); None for a server without step calls
    (the HTTP floor, the torch baseline). Several servers (independent gateways): ``url`` and ``pid``
    list them, client ``k`` sends to server ``k`` modulo their number, and the figures are their sums
    (``server`` CPU ms per caption, its main threads', cores used) or over all of them (rows per call)."""
    urls = [url] if isinstance(url, str) else list(url)
    pids = [] if pid is None else [pid] if isinstance(pid, int) else list(pid)
    addresses = [(httpx.URL(u).host, int(httpx.URL(u).port or 80)) for u in urls]
    target = "/v1/captions?" + urlencode(query)
    bodies = [multipart_body(p) for p in pngs]
    before = await _step_totals(urls, step_model)
    latencies: list[float] = []
    sent = received = errors_5xx = other = 0
    stop = time.perf_counter() + duration

    async def worker(k: int) -> None:
        nonlocal sent, received, errors_5xx, other
        connection = RawConnection(*addresses[k % len(addresses)])
        i = k
        try:
            while time.perf_counter() < stop:
                body = bodies[i % len(bodies)]
                i += clients
                sent += 1
                start = time.perf_counter()
                try:
                    status, _ = await connection.post(target, body)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    other += 1
                    await connection.close()
                    continue
                received += 1
                if status >= 500:
                    errors_5xx += 1
                elif status == 200:
                    latencies.append((time.perf_counter() - start) * 1e3)
                else:
                    other += 1
        finally:
            await connection.close()

    servers = {"server": pids[0]} if len(pids) == 1 else {f"server{n}": p for n, p in enumerate(pids)}
    meter = CpuMeter({**servers, "client": os.getpid()}, main_threads=tuple(servers)) if pids else None
    if meter is not None:
        meter.start()
    start = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    elapsed = time.perf_counter() - start
    if meter is not None:
        meter.stop()
    after = await _step_totals(urls, step_model)
    return {
        "clients": clients,
        "captions_per_s": round(len(latencies) / elapsed, 2),
        "p50_ms": round(float(np.percentile(latencies, 50)), 2) if latencies else None,
        "p99_ms": round(float(np.percentile(latencies, 99)), 2) if latencies else None,
        **(_step_figures(before, after) if before is not None and after is not None else {}),
        "sent": sent,
        "received": received,
        "errors_5xx": errors_5xx,
        "errors_other": other,
        **(
            {
                "cpu_ms_per_caption": _summed(meter.per_item_ms(len(latencies)), servers),
                "cpu_busy": meter.busy_share(),
                "main_thread_busy": max(meter.main_thread_busy().values(), default=None),
                "server_cores_used": round(sum(meter.cpu_s[n] for n in servers) / meter.wall_s, 3)
                if meter.wall_s > 0
                else 0.0,
            }
            if meter is not None
            else {}
        ),
    }


def _summed(per_item: dict[str, float], servers: dict[str, int]) -> dict[str, float]:
    """``per_item`` (``CpuMeter.per_item_ms``) with several servers' figures summed into ``server`` and
    ``server_main_thread`` (one server's are already so named)."""
    if len(servers) < 2 or not per_item:
        return per_item
    out = {
        k: v
        for k, v in per_item.items()
        if k not in servers and k.removesuffix("_main_thread") not in servers
    }
    out["server"] = round(sum(per_item[n] for n in servers), 3)
    out["server_main_thread"] = round(sum(per_item[f"{n}_main_thread"] for n in servers), 3)
    return out


async def _step_totals(urls: Sequence[str], step_model: str | None) -> tuple[tuple[float, float], ...] | None:
    """(rows sum, calls) and (seconds sum, calls) of ``step_model`` in the servers' ``/metrics``, summed."""
    if step_model is None:
        return None
    totals = np.zeros(4)
    for url in urls:
        async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
            text = (await client.get("/metrics")).text
        totals += [*step_rows(text, step_model), *step_call_seconds(text, step_model)]
    rows, calls, seconds, timed = (float(x) for x in totals)
    return (rows, calls), (seconds, timed)


def _step_figures(
    before: tuple[tuple[float, float], ...], after: tuple[tuple[float, float], ...]
) -> dict[str, float | None]:
    """Mean rows per step call and the step call's wall ms in the server between two ``_step_totals``."""
    (rows0, calls0), (secs0, timed0) = before
    (rows1, calls1), (secs1, timed1) = after
    calls, timed = calls1 - calls0, timed1 - timed0
    return {
        "mean_rows_per_call": round((rows1 - rows0) / calls, 2) if calls else 0.0,
        # the step call's wall time inside the server under this load (None: no such metric)
        "step_ms_under_load": round((secs1 - secs0) / timed * 1e3, 3) if timed else None,
    }


__all__ = [
    "BOUNDARY",
    "Gateway",
    "RawConnection",
    "closed_loop",
    "free_port",
    "histogram_totals",
    "multipart_body",
    "request_head",
    "samples",
    "step_call_seconds",
    "step_rows",
]
