"""``compcap serve --api-processes 2``: two HTTP processes and one engine core, real processes on an
ephemeral port, always torn down (``service.gateway.split``).

- The 183 behaviour pins hold through HTTP, every case posted at once (their rows meet in the core's
  step calls whichever API process took them); an explanation (its step observer streamed back from
  the core) works through it, and one scrape of /metrics has every process's metrics.
- A probe job and a comparison run through it; the core can hold the Triton pool (COMPCAP_BACKEND=triton)
  with the captions of the embedded backend.
- SIGKILL of the engine core under load: every request is answered (200, or 503 with Retry-After
  while the core is away), none waits past its deadline, and captions come back by themselves.
- An API process that dies is replaced.
- SIGTERM drains: the captions in flight are answered 200, then every process exits."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from service.manifest import load_manifest
from tests.integration.conftest import free_port, local_triton, serving_process
from tests.pins import PINNED, REPO, checked, pin_images
from tests.reload_repo import add_twin_captioner, repo_without_probe_sets

pytestmark = pytest.mark.integration

DEADLINE_S = 120.0


def png(image: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def children(parent: int) -> dict[int, str]:
    """Live descendants of ``parent``: pid -> command line."""
    out: dict[int, str] = {}
    frontier = {parent}
    while frontier:
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) in frontier and fields[0] != "Z":
                    out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    found.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
        frontier = found
    return out


def core_pid(parent: int) -> int:
    cores = [pid for pid, cmd in children(parent).items() if "service.engine.core" in cmd]
    assert len(cores) == 1, children(parent)
    return cores[0]


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    yield from serve_split(REPO, tmp_path)


def serve_split(repo: Path, tmp_path: Path, **extra_env: str) -> Iterator[tuple[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_MAX_BEAM_SIZE": "100",
        "COMPCAP_REQUEST_DEADLINE_S": str(DEADLINE_S),
        "COMPCAP_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "COMPCAP_LOG_FORMAT": "text",
        **extra_env,
    }
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    cmd += ["--api-processes", "2"]
    with serving_process(cmd, env, port, tmp_path / "serve.log") as (url, proc):
        workers = [pid for pid, c in children(proc.pid).items() if "service.engine.core" not in c]
        assert len(workers) >= 2 and core_pid(proc.pid)  # two API processes (and their helpers), one core
        yield url, proc


def test_the_pins_hold_through_http_and_the_features_work(split: tuple[str, Any]) -> None:
    url, _ = split
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    images = [png(im) for im in pin_images(pinned, load_manifest(REPO))]
    cases = pinned["cases"]

    def post(options: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{url}/v1/captions", json={"images": images, **options}, timeout=DEADLINE_S + 30)
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(post, [c["options"] for c in cases]))
    wrong = []
    for n, i in checked(pinned):
        got = answers[n]["results"][i]
        tokens = [c["tokens"] for c in got["captions"]]
        original = got.get("original_captions")
        original = None if original is None else [c["tokens"] for c in original]
        want = (cases[n]["captions"][i], None if cases[n]["original"] is None else cases[n]["original"][i])
        if (tokens, original) != want:
            wrong.append((n, i, cases[n]["options"]))
    assert wrong == [] and len(checked(pinned)) >= 170

    explained = httpx.post(f"{url}/v1/explain", json={"image": images[0], "beam_size": 3}, timeout=120)
    assert explained.status_code == 200, explained.text
    body = explained.json()
    assert body["method"] == "attention" and [w["word"] for w in body["words"]] == body["caption"].split()
    forced = httpx.post(
        f"{url}/v1/explain",
        json={"image": images[0], "caption": body["caption"], "overlays": False},
        timeout=120,
    )
    assert forced.status_code == 200 and forced.json()["source"] == "client", forced.text
    assert [w["values"] for w in forced.json()["words"]] == [w["values"] for w in body["words"]]

    # one scrape has every process's metrics under the usual names: the API processes' requests, the
    # core's captions and step calls
    text = httpx.get(f"{url}/metrics", timeout=10).text
    served = sum(float(v) for k, v in metric_lines(text) if k.startswith("compcap_captions_served_total"))
    assert served >= len(cases) * len(images)
    posts = sum(
        float(v)
        for k, v in metric_lines(text)
        if k.startswith("compcap_request_latency_seconds_count") and 'route="/v1/captions"' in k
    )
    assert posts == len(cases)
    steps = {k for k, v in metric_lines(text) if k.startswith("compcap_beam_rows_per_decoder_call_count")}
    assert {'compcap_beam_rows_per_decoder_call_count{model="butr_step"}'} <= steps


def metric_lines(text: str) -> list[tuple[str, str]]:
    return [tuple(line.rsplit(" ", 1)) for line in text.splitlines() if line and not line.startswith("#")]  # type: ignore[misc]


def test_probe_jobs_and_comparisons_run_through_the_split(tiny_repo: Path, tmp_path: Path) -> None:
    """A probe job (its images captioned through the core at background priority, its state in the
    shared store: any API process answers for it) and a comparison of three configurations."""
    for url, _ in serve_split(tiny_repo, tmp_path):
        started = httpx.post(
            f"{url}/v1/probes",
            json={"kind": "productivity", "model": "butd", "beam_size": 2, "images": 3},
            timeout=30,
        )
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + 240
        while True:
            job = httpx.get(f"{url}/v1/probes/{started.json()['id']}", timeout=30).json()
            if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert job["status"] == "succeeded", job
        image = png(np.random.default_rng(3).integers(0, 256, (96, 96, 3), dtype=np.uint8))
        configurations = [
            {"name": "BUTD", "model": "butd", "beam_size": 3},
            {"name": "BUTR", "model": "butr", "beam_size": 3, "rerank": False},
            {
                "name": "WEAK",
                "model": "butd",
                "beam_size": 1,
                "hooks": [{"name": "ban_words", "params": {"words": ["a"]}}],
            },
        ]
        compared = httpx.post(
            f"{url}/v1/compare", json={"images": [image, image], "configurations": configurations}, timeout=60
        )
        assert compared.status_code == 200, compared.text
        rows = compared.json()["images"]
        assert len(rows) == 2 and all(set(row["captions"]) == {"BUTD", "BUTR", "WEAK"} for row in rows)
        assert all("a" not in row["captions"]["WEAK"].split() for row in rows)


def test_a_captioner_added_on_disk_is_served_by_every_api_process_and_the_core(
    tiny_repo: Path, tmp_path: Path
) -> None:
    """Across processes: a captioner added to the repository while the split serves is
    listed by every API process and captioned by the core within the watch's period (nobody restarted);
    an admin reload is recorded in the shared store for every replica (its generation)."""
    repo = repo_without_probe_sets(tiny_repo, tmp_path / "repo")
    image = png(np.random.default_rng(7).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    for url, _ in serve_split(repo, tmp_path / "split", COMPCAP_REPO_WATCH_S="0.2"):
        body = {"images": [image], "model": "butd", "beam_size": 3}
        before = httpx.post(f"{url}/v1/captions", json=body, timeout=60)
        assert before.status_code == 200, before.text
        add_twin_captioner(repo, "butd", "twin")
        deadline = time.monotonic() + 60  # a hang guard; the watch looks every 0.2 s
        seen = 0
        while seen < 20:  # 20 answers in a row (fresh connections: either API process) list the twin
            assert time.monotonic() < deadline, "an API process did not pick the captioner up"
            listed = {c["name"] for c in httpx.get(f"{url}/v1/models", timeout=10).json()["captioners"]}
            seen = seen + 1 if "twin" in listed else 0
            time.sleep(0.02)
        twin = httpx.post(f"{url}/v1/captions", json={**body, "model": "twin"}, timeout=60)
        assert twin.status_code == 200, twin.text  # the core loaded it too
        assert twin.json()["results"] == before.json()["results"]
        forced = httpx.post(f"{url}/v1/admin/reload", json={"force": True}, timeout=120)
        assert forced.status_code == 200, forced.text
        assert forced.json()["generation"] == 1 and forced.json()["models_reloaded"]
        after = httpx.post(f"{url}/v1/captions", json=body, timeout=60)
        assert after.status_code == 200 and after.json()["results"] == before.json()["results"]


def test_the_core_can_hold_the_triton_pool(tiny_repo: Path, tmp_path: Path) -> None:
    """COMPCAP_BACKEND=triton: the engine core is the one Triton client; its captions are those of the
    embedded backend's split."""
    image = png(np.random.default_rng(5).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    body = {"images": [image], "model": "butd", "beam_size": 3}
    answers = []
    with local_triton(tiny_repo) as triton:
        for backend in ("triton", "onnxruntime"):
            env = {"COMPCAP_BACKEND": backend, "COMPCAP_TRITON_URL": triton.grpc_url}
            for url, _ in serve_split(tiny_repo, tmp_path / backend, **env):
                assert httpx.get(f"{url}/readyz", timeout=10).json()["backend"] == backend
                r = httpx.post(f"{url}/v1/captions", json=body, timeout=60)
                assert r.status_code == 200, r.text
                answers.append([c["tokens"] for c in r.json()["results"][0]["captions"]])
    assert answers[0] == answers[1]


def test_a_killed_engine_core_gives_503_then_captions_again(split: tuple[str, Any]) -> None:
    url, proc = split
    image = png(np.random.default_rng(1).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    first = core_pid(proc.pid)
    stop_at = time.monotonic() + 30
    killed_at: list[float] = []

    def client(k: int) -> list[tuple[int, float, float, str | None]]:
        seen = []
        with httpx.Client(timeout=DEADLINE_S + 30) as http:
            while time.monotonic() < stop_at:
                start = time.monotonic()
                r = http.post(f"{url}/v1/captions", json={"images": [image], "beam_size": 3})
                seen.append((r.status_code, start, time.monotonic(), r.headers.get("retry-after")))
                if r.status_code == 200 and killed_at and start > killed_at[0] + 1:
                    return seen  # captions again after the kill
                if r.status_code == 503:
                    time.sleep(0.05)
        return seen

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(client, k) for k in range(8)]
        time.sleep(3)
        os.kill(first, signal.SIGKILL)
        killed_at.append(time.monotonic())
        results = [f.result() for f in futures]
    seen = [s for per in results for s in per]
    assert {code for code, *_ in seen} <= {200, 503}
    assert any(code == 503 for code, *_ in seen), "no request saw the core away"
    assert all(ra is not None for code, _, _, ra in seen if code == 503), "503 without Retry-After"
    assert max(end - start for _, start, end, _ in seen) < DEADLINE_S
    back = [start for code, start, _, _ in seen if code == 200 and start > killed_at[0]]
    assert back and min(back) - killed_at[0] < 10, "captions did not come back within 10 s"
    assert core_pid(proc.pid) != first


def test_an_api_process_that_dies_is_replaced(split: tuple[str, Any]) -> None:
    url, proc = split
    image = png(np.random.default_rng(6).integers(0, 256, (96, 96, 3), dtype=np.uint8))

    def workers() -> set[int]:
        return {pid for pid, cmd in children(proc.pid).items() if "spawn_main" in cmd}

    before = workers()
    assert len(before) == 2, children(proc.pid)
    os.kill(min(before), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while len(workers() - before) < 1 or len(workers()) < 2:
        assert time.monotonic() < deadline, f"not replaced: {children(proc.pid)}"
        time.sleep(0.1)
    for _ in range(4):  # both processes answer (the new one once its app has started)
        r = httpx.post(f"{url}/v1/captions", json={"images": [image], "beam_size": 2}, timeout=60)
        assert r.status_code == 200, r.text


def test_sigterm_answers_the_captions_in_flight_then_every_process_exits(split: tuple[str, Any]) -> None:
    url, proc = split
    image = png(np.random.default_rng(2).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    family = children(proc.pid)

    def post(_: int) -> int:
        r = httpx.post(f"{url}/v1/captions", json={"images": [image] * 4, "beam_size": 100}, timeout=60)
        return r.status_code

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(post, k) for k in range(4)]
        time.sleep(1.0)  # the requests are in flight (beam 100 on four images each)
        proc.send_signal(signal.SIGTERM)
        codes = [f.result() for f in futures]
    assert codes == [200] * 4
    assert proc.wait(timeout=60) is not None
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() and "Z" not in state(pid) for pid in family):
        assert time.monotonic() < deadline, f"left running: {children(proc.pid)}"
        time.sleep(0.1)


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
