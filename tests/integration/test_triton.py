"""A real ``tritonserver`` (from ``.venv-triton``, python-backend mirror of the tiny repository) on
OS-assigned ports: health and metrics endpoints, every model equal to onnxruntime in-process, the
``triton`` backend's error reasons, and the gateway's captions token-identical to the embedded backend.
The server is always stopped, its process group included."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.backends.base import BackendError
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.backends.triton.backend import TritonBackend
from service.engine.state_rows import state_feed
from service.gateway.app import create_app
from service.manifest import Manifest, load_manifest
from service.metrics import Metrics
from service.settings import Settings
from service.tritonlocal.server import LocalTriton, TritonError, TritonInstall
from tests.integration.conftest import free_port, local_triton, triton_metrics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4


def require_triton_venv() -> None:
    try:
        TritonInstall.find()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (`make test` creates it)")


@pytest.fixture(scope="module")
def triton(tiny_repo: Path) -> Iterator[LocalTriton]:
    with local_triton(tiny_repo) as server:
        yield server


@pytest.fixture(scope="module")
def manifest(tiny_repo: Path) -> Manifest:
    return load_manifest(tiny_repo)


@pytest.fixture(scope="module")
def world_pngs(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """Test images of the tiny repository's SceneWorld (rendered again if the build's work dir is gone)."""
    folder = tiny_repo.with_name(tiny_repo.name + ".work") / "data" / "test" / "images"
    if not folder.is_dir():
        from sceneworld.dataset import write_dataset

        out = tmp_path_factory.mktemp("world")
        size = load_manifest(tiny_repo).image.height
        write_dataset(out, images=4, seed=1, image_size=size, progress=False)
        folder = out / "images"
    return [p.read_bytes() for p in sorted(folder.glob("*.png"))[:4]]


def image_batch(pngs: list[bytes], manifest: Manifest) -> np.ndarray:
    import io

    size = (manifest.image.width, manifest.image.height)
    return np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB").resize(size)) for b in pngs])


def model_inputs(manifest: Manifest, images: np.ndarray, ort: OnnxRuntimeBackend) -> dict[str, dict]:
    """Real inputs for every model of the repository, computed through the pipeline by onnxruntime."""

    async def build() -> dict[str, dict]:
        regions = (await ort.infer("visual_encoder", {"image": images}))["regions"]
        inputs: dict[str, dict] = {"visual_encoder": {"image": images}}
        n = len(images)
        rng = np.random.default_rng(0)
        for cap in manifest.captioners:
            inputs[cap.init] = {"regions": regions}
            init = await ort.infer(cap.init, {"regions": regions})
            rows = 3 * n
            index = np.repeat(np.arange(n), 3)
            length = rng.integers(1, 4, rows)
            tokens = rng.integers(4, manifest.vocabulary.size, (rows, 3))
            tokens[:, 0] = manifest.vocabulary.bos_id
            inputs[cap.step] = {
                "memory": init["memory"],
                "image_index": index.astype(np.int64),
                "tokens": tokens.astype(np.int64),
                "length": length.astype(np.int64),
                **state_feed(
                    init["state"][index] + rng.normal(0, 0.1, (rows, cap.state_dim)).astype(np.float32),
                    manifest.model(cap.step).gathers_state,
                ),
            }
        for ranker in manifest.rankers:
            inputs[ranker.image] = {"regions": regions}
            tokens = rng.integers(4, manifest.vocabulary.size, (n, 6)).astype(np.int64)
            tokens[:, 0] = manifest.vocabulary.bos_id
            inputs[ranker.text] = {"tokens": tokens, "length": rng.integers(2, 7, (n, 1)).astype(np.int64)}
        return inputs

    return asyncio.run(build())


def test_health_ready_and_stop_cleans_up(tiny_repo: Path) -> None:
    require_triton_venv()
    server = LocalTriton(tiny_repo).start()
    try:
        seconds = server.wait_ready(timeout=120)
        assert seconds < 120
        assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200
        pgid = server.process.pid if server.process else 0
        work = server.work
    finally:
        server.stop()
    with pytest.raises(ProcessLookupError):  # the server and its python-backend stubs are gone
        os.killpg(pgid, 0)
    assert work is not None and not work.exists()
    assert not list(Path("/dev/shm").glob(f"{server.shm_prefix}*"))
    server.stop()  # idempotent


def test_a_taken_port_is_reported_with_the_log(tiny_repo: Path) -> None:
    require_triton_venv()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = LocalTriton(tiny_repo, grpc_port=taken.getsockname()[1]).start()
        try:
            with pytest.raises(TritonError, match="exited with") as failed:
                server.wait_ready(timeout=60)
        finally:
            server.stop()
    assert "address already in use" in str(failed.value).lower()


@pytest.mark.parametrize("shared_memory", [False, True], ids=["grpc", "shm"])
def test_models_match_onnxruntime(
    triton: LocalTriton, tiny_repo: Path, manifest: Manifest, world_pngs: list[bytes], shared_memory: bool
) -> None:
    ort = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
    inputs = model_inputs(manifest, image_batch(world_pngs, manifest), ort)
    assert set(inputs) == {m.name for m in manifest.models}

    async def compare() -> dict[str, float]:
        backend = await TritonBackend.connect(
            triton.grpc_url, manifest, Metrics(), shared_memory=shared_memory
        )
        worst = {}
        try:
            for name, feed in inputs.items():
                served, local = await backend.infer(name, feed), await ort.infer(name, feed)
                assert set(served) == set(local) == {t.name for t in manifest.model(name).outputs}
                for key, value in local.items():
                    assert served[key].shape == value.shape and served[key].dtype == value.dtype
                worst[name] = max(float(np.abs(served[k] - v).max()) for k, v in local.items())
        finally:
            await backend.close()
            await ort.close()
        return worst

    worst = asyncio.run(compare())
    assert all(diff <= TOLERANCE for diff in worst.values()), worst
    for entry in manifest.models:
        assert triton_successes(triton, entry.name) >= 1, entry.name


def triton_successes(triton: LocalTriton, model: str) -> int:
    """``nv_inference_request_success`` of ``model`` from Triton's own metrics port."""
    metrics = triton_metrics(triton)
    found = re.search(rf'^nv_inference_request_success{{model="{model}",version="1"}} (\d+)', metrics, re.M)
    assert found, f"no nv_inference_request_success for {model} in:\n{metrics[:2000]}"
    return int(found.group(1))


@pytest.mark.parametrize("shared_memory", [False, True], ids=["grpc", "shm"])
def test_backend_reasons_metrics_and_chunking(
    triton: LocalTriton, tiny_repo: Path, manifest: Manifest, shared_memory: bool
) -> None:
    metrics = Metrics()
    ort = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
    encoder = manifest.model("visual_encoder")
    many = encoder.max_batch_size + 6
    images = np.random.default_rng(1).integers(0, 256, (many, *encoder.inputs[0].dims), dtype=np.uint8)
    cap = manifest.captioner(manifest.default_captioner)

    async def run() -> None:
        backend = await TritonBackend.connect(triton.grpc_url, manifest, metrics, shared_memory=shared_memory)
        try:
            # where its instances run, as the server's configs say (the local server: CPU instances)
            assert backend.devices == {m.name: "cpu" for m in manifest.models}
            assert 'compcap_model_device_info{device="cpu",model="visual_encoder",provider="triton"} 1.0' in (
                metrics.exposition().decode()
            )
            # more images than max_batch_size: sent in chunks, same result as one onnxruntime call
            served = await backend.infer("visual_encoder", {"image": images})
            local = await ort.infer("visual_encoder", {"image": images})
            assert served["regions"].shape == local["regions"].shape
            assert np.abs(served["regions"] - local["regions"]).max() <= TOLERANCE
            assert served["regions"].flags.writeable
            with pytest.raises(BackendError) as unknown:
                await backend.infer("no_such_model", {"image": images})
            assert unknown.value.reason == "unknown_model"
            with pytest.raises(BackendError) as dtype:
                await backend.infer("visual_encoder", {"image": images[:2].astype(np.float32)})
            assert dtype.value.reason == "bad_input"
            with pytest.raises(BackendError) as missing:
                await backend.infer("visual_encoder", {})
            assert missing.value.reason == "bad_input"
            regions = local["regions"][:2]
            init = await ort.infer(cap.init, {"regions": regions})
            step = {
                "memory": init["memory"],
                "image_index": np.array([0, 7], dtype=np.int64),  # no image 7: fails inside the model
                "tokens": np.ones((2, 1), dtype=np.int64),
                "length": np.ones(2, dtype=np.int64),
                **state_feed(init["state"], manifest.model(cap.step).gathers_state),
            }
            with pytest.raises(BackendError) as server_side:
                await backend.infer(cap.step, step)
            assert server_side.value.reason == "bad_input"
            assert "out of" in str(server_side.value)
            step["image_index"] = np.array([0, 1], dtype=np.int64)
            assert (await backend.infer(cap.step, step))["logprobs"].shape == (2, manifest.vocabulary.size)
        finally:
            await backend.close()
            await ort.close()

    asyncio.run(run())
    text = metrics.exposition().decode()
    for model, reason in [
        ("no_such_model", "unknown_model"),
        ("visual_encoder", "bad_input"),
        (cap.step, "bad_input"),
    ]:
        assert f'compcap_backend_errors_total{{model="{model}",reason="{reason}"}}' in text
    assert f'compcap_model_call_seconds_count{{model="{cap.step}"}} 1.0' in text
    assert 'compcap_model_call_seconds_count{model="visual_encoder"} 1.0' in text


def test_shared_memory_concurrency_growth_and_cleanup(
    triton: LocalTriton, tiny_repo: Path, manifest: Manifest
) -> None:
    """Concurrent calls each lease their own region, regions grow with the tensors, and close()
    unregisters every region from the server and unlinks it from /dev/shm."""
    ort = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
    cap = manifest.captioner(manifest.default_captioner)
    rng = np.random.default_rng(2)
    dims = manifest.model("visual_encoder").inputs[0].dims

    async def run() -> list[str]:
        backend = await TritonBackend.connect(triton.grpc_url, manifest, shared_memory=True)
        try:
            feeds = []
            for images in (1, 2, 40, 3, 120, 5):  # small and large calls at once: the pool must grow
                pixels = rng.integers(0, 256, (images, *dims), dtype=np.uint8)
                regions = (await ort.infer("visual_encoder", {"image": pixels}))["regions"]
                init = await ort.infer(cap.init, {"regions": regions})
                index = np.repeat(np.arange(images), 5).astype(np.int64)
                tokens = rng.integers(4, manifest.vocabulary.size, (len(index), 2)).astype(np.int64)
                tokens[:, 0] = manifest.vocabulary.bos_id
                feeds.append(
                    {
                        "memory": init["memory"],
                        "image_index": index,
                        "tokens": tokens,
                        "length": np.full(len(index), 2, dtype=np.int64),
                        **state_feed(init["state"][index], manifest.model(cap.step).gathers_state),
                    }
                )
            for _ in range(3):
                served = await asyncio.gather(*(backend.infer(cap.step, f) for f in feeds))
                for feed, got in zip(feeds, served, strict=True):
                    want = await ort.infer(cap.step, feed)
                    for key, value in want.items():
                        assert got[key].shape == value.shape
                        assert np.abs(got[key] - value).max() <= TOLERANCE
            # a call cancelled in flight gives its region up (the server may still write into it)
            task = asyncio.ensure_future(backend.infer(cap.step, feeds[4]))
            await asyncio.sleep(0.001)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            served = await asyncio.gather(*(backend.infer(cap.step, f) for f in feeds))
            for feed, got in zip(feeds, served, strict=True):
                want = await ort.infer(cap.step, feed)
                assert np.abs(got["logprobs"] - want["logprobs"]).max() <= TOLERANCE
            assert backend.pool is not None
            names = backend.pool.names
            assert len(names) >= 2
            status = await backend.client.get_system_shared_memory_status(as_json=True)
            assert set(names) <= set(status.get("regions", {}))
        finally:
            await backend.close()
            await ort.close()
        return names

    names = asyncio.run(run())

    async def server_regions() -> set[str]:
        from tritonclient.grpc.aio import InferenceServerClient

        client = InferenceServerClient(triton.grpc_url)
        try:
            status = await client.get_system_shared_memory_status(as_json=True)
        finally:
            await client.close()
        return set(status.get("regions", {}))

    assert not set(names) & asyncio.run(server_regions())
    assert not [n for n in names if Path("/dev/shm", n).exists()]


@pytest.mark.parametrize("shared_memory", [False, True], ids=["grpc", "shm"])
def test_a_stalled_server_is_unavailable_not_a_hang(
    triton: LocalTriton, manifest: Manifest, shared_memory: bool
) -> None:
    """Calls to a server that stopped answering (SIGSTOP) fail after the call timeout, and the
    backend works again once the server resumes.

    Only ``tritonserver`` is stopped, not its python-backend stubs: the stubs are this local server's
    stand-in for the onnxruntime backend of production, and a stub frozen beside its server misses the
    health handshake the python backend runs with it (every 300 ms, answered within 1 s), which is
    not what this test is about; with the whole process group stopped on a loaded machine the server
    did not always come back."""
    assert triton.process is not None
    pid = triton.process.pid
    images = np.zeros((2, *manifest.model("visual_encoder").inputs[0].dims), dtype=np.uint8)

    async def run() -> None:
        backend = await TritonBackend.connect(triton.grpc_url, manifest, shared_memory=shared_memory)
        backend.call_timeout_s = 0.5
        if backend.pool is not None:
            backend.pool.timeout_s = 0.5
        try:
            os.kill(pid, signal.SIGSTOP)
            try:
                with pytest.raises(BackendError) as stalled:
                    await backend.infer("visual_encoder", {"image": images[:1]})
                    await backend.infer("visual_encoder", {"image": np.concatenate([images] * 40)})
            finally:
                os.kill(pid, signal.SIGCONT)
            assert stalled.value.reason == "unavailable"
            backend.call_timeout_s = 30.0
            assert (await backend.infer("visual_encoder", {"image": images}))["regions"].shape[0] == 2
        finally:
            await backend.close()

    asyncio.run(run())
    assert triton.process.poll() is None and triton.is_ready(), triton.log_tail()


def test_connect_is_bounded_and_waits_for_a_starting_server(tiny_repo: Path, manifest: Manifest) -> None:
    require_triton_venv()

    async def nobody() -> None:
        with pytest.raises(BackendError) as down:
            await TritonBackend.connect(f"127.0.0.1:{free_port()}", manifest, timeout_s=0.5)
        assert down.value.reason == "unavailable"

    asyncio.run(nobody())
    server = LocalTriton(tiny_repo).start()  # not waited for: connect() does the waiting

    async def starting() -> None:
        backend = await TritonBackend.connect(server.grpc_url, manifest, timeout_s=120)
        await backend.close()

    try:
        asyncio.run(starting())
        # one probe (a server still loading answers 503 at once); 30 s only bounds a busy machine's answer
        assert server.is_ready(timeout_s=30.0)
    finally:
        server.stop()


def caption_tokens(client: TestClient, pngs: list[bytes], **params: object) -> list[dict]:
    files = [("image", (f"{i}.png", b, "image/png")) for i, b in enumerate(pngs)]
    response = client.post("/v1/captions", files=files, params={k: str(v) for k, v in params.items()})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def wait_ready(client: TestClient, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, client.get("/readyz").json()
        time.sleep(0.05)


@pytest.mark.parametrize("shared_memory", [False, True], ids=["grpc", "shm"])
def test_gateway_on_triton_matches_embedded(
    triton: LocalTriton, tiny_repo: Path, manifest: Manifest, world_pngs: list[bytes], shared_memory: bool
) -> None:
    embedded = create_app(Settings(repo=tiny_repo, intra_op_threads=1))
    settings = Settings(
        repo=tiny_repo, backend="triton", triton_url=triton.grpc_url, triton_shared_memory=shared_memory
    )
    served = create_app(settings)
    calls_before = {c.step: triton_successes(triton, c.step) for c in manifest.captioners}
    with TestClient(embedded) as local, TestClient(served) as remote:
        wait_ready(local)
        wait_ready(remote)
        backend = served.state.runtime.backend
        assert isinstance(backend, TritonBackend) and (backend.pool is not None) == shared_memory
        for cap in manifest.captioners:  # BUTR re-ranked by its own head, BUTD without re-ranking
            params = {"beam_size": 5, "model": cap.name}
            want = caption_tokens(local, world_pngs, **params)
            got = caption_tokens(remote, world_pngs, **params)
            assert len(got) == len(want) == len(world_pngs)
            for a, b in zip(got, want, strict=True):
                assert [c["tokens"] for c in a["captions"]] == [c["tokens"] for c in b["captions"]]
                assert a["caption"] == b["caption"]
                for x, y in zip(a["captions"], b["captions"], strict=True):
                    assert x["logprob"] == pytest.approx(y["logprob"], abs=1e-3)
        metrics = remote.get("/metrics").text
        assert 'compcap_model_call_seconds_count{model="visual_encoder"}' in metrics
    for step, before in calls_before.items():  # the served app's decoder steps ran on Triton
        assert triton_successes(triton, step) > before


def test_compcap_triton_command(tiny_repo: Path, tmp_path: Path) -> None:
    """``compcap triton`` on free ports: ready line, health, SIGTERM ends it and its server."""
    require_triton_venv()
    log = (tmp_path / "cli.log").open("w+b")
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "triton",
        "--repo",
        str(tiny_repo),
        "--work",
        str(tmp_path / "w"),
    ]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while b"ready in" not in (tmp_path / "cli.log").read_bytes():
            assert proc.poll() is None, (tmp_path / "cli.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "cli.log").read_text()
            time.sleep(0.1)
        line = (tmp_path / "cli.log").read_text()
        http = re.search(r"HTTP (http://\S+),", line)
        assert http, line
        assert httpx.get(f"{http.group(1)}/v2/health/ready", timeout=5).status_code == 200
        assert (tmp_path / "w" / "tritonserver.log").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    assert not _servers_in(tmp_path / "w")
    assert not list(Path("/dev/shm").glob(f"compcap{proc.pid}_*"))


def _servers_in(work: Path) -> list[str]:
    """Processes still running with ``work`` on their command line (a leaked server or stub)."""
    result = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if str(work) in line and "ps -eo" not in line]
