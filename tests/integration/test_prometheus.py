"""A real Prometheus (Debian's ``/usr/bin/prometheus``) scraping a real ``compcap serve`` on the tiny
repository, and a real local Triton that the gateway runs on (``.venv-triton``), every second, with the
rules of ``k8s/monitoring`` loaded. After caption traffic (both captioners, a hook, a rejected request),
three small probe jobs and an accepted probe, every recording rule, every dashboard panel expression
and every dashboard variable returns at least one series through ``/api/v1/query``; every rule
evaluates without error and no alert is pending on the healthy stack.

The namespace label a ServiceMonitor would add is a static label of the scrape config here. Without
``.venv-triton`` the gateway runs on onnxruntime and only the Triton panels' check is skipped."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from service.manifest import load_manifest
from service.tritonlocal.server import LocalTriton, TritonInstall
from tests.integration.conftest import free_port, serving
from tests.integration.prometheus_server import (
    PROMETHEUS,
    RULES_FILE_NAME,
    TRITON_GPU_METRICS,
    TRITON_METRICS,
    LocalPrometheus,
    alert_rules,
    dashboard,
    metric_names,
    recording_rules,
    substitute,
    targets,
    variable_selectors,
    write_rules_file,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not PROMETHEUS.is_file(), reason=f"{PROMETHEUS} is absent (Debian's `prometheus` package)"
    ),
]

NAMESPACE = "test"  # what a ServiceMonitor's namespace label would be
DATA_TIMEOUT_S = 60.0


@dataclass
class Stack:
    prometheus: LocalPrometheus
    gateway: str
    no_triton: str | None  # why there is no local Triton, or None
    values: dict[str, str]  # Grafana variables as the dashboard would substitute them
    seconds: dict[str, float] = field(default_factory=dict)


def pngs(size: tuple[int, int], count: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def caption(client: httpx.Client, images: list[bytes], **fields: str) -> httpx.Response:
    files = [("image", (f"{i}.png", b, "image/png")) for i, b in enumerate(images)]
    return client.post("/v1/captions", files=files, data=fields)


def start_probe(client: httpx.Client, body: dict[str, Any]) -> str:
    job = client.post("/v1/probes", json=body)
    assert job.status_code == 202, job.text
    return str(job.json()["id"])


def wait_probe(client: httpx.Client, job_id: str, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = client.get(f"/v1/probes/{job_id}").json()
        if state["status"] not in ("queued", "running"):
            assert state["status"] == "succeeded", state
            return
        time.sleep(0.2)
    raise AssertionError(f"probe {job_id} did not finish in {timeout_s:.0f} s")


def drive_traffic(url: str, repo: Path) -> None:
    """Captions on every captioner (concurrent, one with a hook), a rejected request, one probe of each
    kind on the default captioner and the systematicity one accepted as the baseline.

    The substitutivity probe sets its BLEU gauge only when some original caption holds a word to
    substitute (here: re-ranked, beam >= 3), and then scores METEOR in Java subprocesses (~30 s on two
    cores): it starts first and runs beside the rest."""
    manifest = load_manifest(repo)
    images = pngs((manifest.image.width, manifest.image.height), 3)
    hook = '[{"name": "no_repeat_ngram", "params": {"n": 2}}]'
    model = manifest.default_captioner
    with httpx.Client(base_url=url, timeout=60.0, trust_env=False) as client:
        substitutivity = start_probe(
            client, {"kind": "substitutivity", "model": model, "images": 1, "beam_size": 3}
        )
        with ThreadPoolExecutor(4) as pool:
            calls = [
                pool.submit(caption, client, images[: 1 + i % 3], model=cap.name, beam_size="3")
                for cap in manifest.captioners
                for i in range(4)
            ]
            calls.append(pool.submit(caption, client, images[:1], hooks=hook))
            for call in calls:
                assert call.result().status_code == 200, call.result().text
        rejected = caption(client, images[:1], beam_size="0")
        assert rejected.status_code == 422, rejected.text
        small = {"model": model, "images": 1, "beam_size": 5, "n_best": 5}  # n_best 5: Recall@5
        systematicity = start_probe(client, {"kind": "systematicity", **small})
        wait_probe(client, systematicity)
        accepted = client.post(f"/v1/probes/{systematicity}/accept")
        assert accepted.status_code == 200, accepted.text
        wait_probe(client, start_probe(client, {"kind": "productivity", **small}))
        wait_probe(client, substitutivity)


@pytest.fixture(scope="module")
def stack(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("prometheus")
    began = time.monotonic()
    seconds: dict[str, float] = {}
    with ExitStack() as cleanup:
        no_triton = None
        try:
            TritonInstall.find()
            triton: LocalTriton | None = LocalTriton(tiny_repo)
        except FileNotFoundError as exc:
            triton, no_triton = None, str(exc)
        env = {
            **os.environ,
            "COMPCAP_INTRA_OP_THREADS": "1",
            "COMPCAP_STATE_URL": f"sqlite:///{work / 'state.db'}",
            "COMPCAP_SHADOW_MODEL": "greedy=butd?beam_size=1",  # the shadow rules and panels need data
            "COMPCAP_SHADOW_RATE": "1.0",
        }
        jobs: dict[str, tuple[list[str], dict[str, str]]] = {}
        if triton is not None:
            cleanup.callback(triton.stop)
            triton.start()
            triton.wait_ready(timeout=120)
            env |= {"COMPCAP_BACKEND": "triton", "COMPCAP_TRITON_URL": triton.grpc_url}
            jobs["triton"] = ([f"127.0.0.1:{triton.metrics_port}"], {"namespace": NAMESPACE})
            seconds["triton"] = time.monotonic() - began
        port = free_port()
        cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
        url = cleanup.enter_context(serving(cmd, env, port, work / "serve.log"))
        jobs["compcap-gateway"] = ([f"127.0.0.1:{port}"], {"namespace": NAMESPACE})
        seconds["gateway"] = time.monotonic() - began
        rules = write_rules_file(work / RULES_FILE_NAME)
        prometheus = cleanup.enter_context(LocalPrometheus(work, jobs, [rules], interval="1s"))
        seconds["prometheus"] = time.monotonic() - began
        drive_traffic(url, tiny_repo)
        seconds["traffic"] = time.monotonic() - began
        captioners = "|".join(c.name for c in load_manifest(tiny_repo).captioners)
        values = {"namespace": NAMESPACE, "model": f"({captioners})", "__rate_interval": "1m", "k": "5"}
        yield Stack(prometheus, url, no_triton, values, seconds)


def expressions(values: dict[str, str]) -> dict[str, str]:
    """What to query, by a name for the failure message: each recording rule's series, each dashboard
    target and each dashboard variable's selector, with the Grafana variables substituted."""
    out = {f"rule {name}": f'{name}{{namespace="{NAMESPACE}"}}' for name in recording_rules()}
    board = dashboard()
    out |= {f"panel {t.name}": substitute(t.expr, values) for t in targets(board)}
    for name, (selector, label) in variable_selectors(board).items():
        out[f"variable ${name} ({label})"] = f"count by ({label}) ({substitute(selector, values)})"
    return out


def needs_gpu(expr: str) -> bool:
    """GPU metrics: a CPU Triton exports none (their panels are checked by promtool tests only)."""
    return bool(metric_names(expr) & TRITON_GPU_METRICS)


def needs_triton(expr: str) -> bool:
    return bool(metric_names(expr) & TRITON_METRICS)


def wait_for_data(prometheus: LocalPrometheus, queries: dict[str, str]) -> dict[str, int]:
    """Series count per query once all have data, or at the deadline."""
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while True:
        counts = {name: len(prometheus.query(expr)) for name, expr in queries.items()}
        if all(counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(1.0)


def assert_all_return_data(stack: Stack, queries: dict[str, str]) -> None:
    began = time.monotonic()
    counts = wait_for_data(stack.prometheus, queries)
    empty = [f"{name}: {queries[name]}" for name, n in counts.items() if n == 0]
    up = stack.prometheus.targets_up()
    assert not empty, (
        f"{len(empty)} of {len(queries)} expressions returned no series after "
        f"{time.monotonic() - began:.0f} s (targets up: {up}):\n" + "\n".join(empty)
    )
    print(
        f"{len(queries)} of {len(queries)} expressions returned data; stack ready in "
        f"{stack.seconds}, data after {time.monotonic() - began:.1f} s more"
    )


def test_every_recording_rule_and_gateway_panel_returns_data(stack: Stack) -> None:
    queries = {n: e for n, e in expressions(stack.values).items() if not needs_triton(e) and not needs_gpu(e)}
    assert len([n for n in queries if n.startswith("rule ")]) == len(recording_rules())
    assert_all_return_data(stack, queries)


def test_every_triton_panel_returns_data(stack: Stack) -> None:
    """Every Triton panel but the GPU ones (a CPU Triton exports no nv_gpu_*: not checked here)."""
    queries = {n: e for n, e in expressions(stack.values).items() if needs_triton(e) and not needs_gpu(e)}
    if stack.no_triton:
        pytest.skip(f"no local Triton ({stack.no_triton}); not checked: {', '.join(sorted(queries))}")
    assert queries
    assert_all_return_data(stack, queries)


def test_rules_evaluate_cleanly_and_no_alert_fires_on_a_healthy_stack(stack: Stack) -> None:
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while True:
        rules = [r for g in stack.prometheus.api("rules")["groups"] for r in g["rules"]]
        if all(r["health"] != "unknown" for r in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    bad = {r["name"]: (r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"}
    assert not bad, bad
    assert sorted(r["name"] for r in rules) == sorted([*recording_rules(), *alert_rules()])
    alerts = stack.prometheus.api("alerts")["alerts"]
    assert not alerts, [(a["labels"], a["state"], a["value"]) for a in alerts]
