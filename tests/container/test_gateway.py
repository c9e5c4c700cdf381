"""The CPU gateway image run as an operator runs it: ``--read-only`` as the image's non-root user, all
capabilities dropped, its state on a volume. From ``podman run`` to the first caption of a sample image
at most 5 s; the captions of the behaviour pins' cases token-identical to the in-process engine's pins
(``tests/data/pinned_captions.json``); ``podman healthcheck run`` healthy (the image keeps its
HEALTHCHECK: built ``--format docker``); SIGTERM with a long request in flight answers it, then the
container exits 0. Again as an arbitrary UID in group 0 (as OpenShift runs images): its state is written.
The image is at most 500 MB."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.container.tier import FIGURES, ROOT, Container, Run, started

pytestmark = pytest.mark.container

SAMPLES = sorted((ROOT / "service" / "web" / "static" / "samples").glob("example_*.png"))
MAX_IMAGE_BYTES = 500e6
FIRST_CAPTION_S = 5.0
MEMORY_BOUND_BYTES = 300e6  # 107 MB measured in the issue; a bound that catches a leak or a second copy
SECURE = ("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")


def png(image: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def first_caption(container: Container, started_at: float, timeout_s: float = 60) -> float:
    """Seconds from ``started_at`` (before ``podman run``) to a caption of the first sample image."""
    url = container.url
    while True:
        try:
            with SAMPLES[0].open("rb") as f:
                r = httpx.post(f"{url}/v1/captions", files={"image": f}, timeout=30, trust_env=False)
            if r.status_code == 200:
                assert r.json()["results"][0]["caption"], r.text
                return time.monotonic() - started_at
        except httpx.TransportError:
            pass
        if not container.state()["Running"]:
            raise AssertionError(f"the gateway exited:\n{container.logs()[-4000:]}")
        if time.monotonic() - started_at > timeout_s:
            raise AssertionError(f"no caption in {timeout_s} s:\n{container.logs()[-4000:]}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def gateway(run: Run, serve_image: str) -> Iterator[Container]:
    """The gateway, read-only, as the image's user, its state on a named volume; started by the fixture
    so that ``podman run`` → first caption is measured from the start."""
    begin = time.monotonic()
    container = run.start(
        serve_image, *SECURE, "-v", "compcap-state:/var/lib/compcap", "-e", "COMPCAP_MAX_BEAM_SIZE=100"
    )
    try:
        FIGURES["first_caption_s"] = first_caption(container, begin)
        FIGURES["memory_mb"] = container.memory_bytes() / 1e6
        yield container
    finally:
        container.remove()


def test_the_image_is_at_most_500_mb(run: Run, serve_image: str) -> None:
    size = run.image(serve_image)["Size"]
    history = json.loads(run("history", "--format", "json", serve_image))
    sizes = [h["size"] / 1e6 for h in history if h["size"] > 0]  # from the top
    # the code, the models, the venv; the base at the bottom; between them the user and its directory
    code, models, venv, *user, base = sizes
    FIGURES["image_mb"] = size / 1e6
    FIGURES["image_layers"] = (
        f"base {base:.1f}, user {sum(user):.2f}, venv {venv:.1f}, models {models:.1f}, code {code:.1f}"
    )
    assert size <= MAX_IMAGE_BYTES, f"{size / 1e6:.0f} MB: {FIGURES['image_layers']}"


def test_the_image_holds_the_gateway_and_not_the_lab_nor_build_tools(run: Run, serve_image: str) -> None:
    """No lab code (compcap_lab), no torch, no pip or setuptools, no test suites of the wheels; the
    HEALTHCHECK kept (--format docker)."""
    probe = (
        "import importlib.util as u, pathlib, sys, service; "
        "site = pathlib.Path(sys.prefix, 'lib', 'python3.11', 'site-packages'); "
        "print([m for m in ('compcap_lab', 'torch', 'pip', 'setuptools', 'pytest') if u.find_spec(m)], "
        "sorted(str(p.relative_to(site)) for p in site.glob('**/tests') if p.is_dir()))"
    )
    out = run("run", "--rm", "--entrypoint", "python", serve_image, "-c", probe)
    assert out.strip() == "[] []", out
    assert run.image(serve_image)["Healthcheck"]["Test"], "the HEALTHCHECK was dropped"


def test_podman_run_to_the_first_caption_takes_at_most_5_s(gateway: Container) -> None:
    assert FIGURES["first_caption_s"] <= FIRST_CAPTION_S, FIGURES["first_caption_s"]


def test_memory_after_the_first_caption(gateway: Container) -> None:
    assert 0 < FIGURES["memory_mb"] * 1e6 <= MEMORY_BOUND_BYTES, FIGURES["memory_mb"]


def test_it_runs_read_only_as_the_images_user_with_its_state_on_the_volume(gateway: Container) -> None:
    run = gateway.run
    assert run("exec", gateway.id, "id", "-u").strip() == "10001"
    listing = run("exec", gateway.id, "ls", "-ln", "/var/lib/compcap")
    assert "compcap_state.db" in listing and " 10001 " in listing, listing
    denied = subprocess.run(
        ["podman", "exec", gateway.id, "touch", "/opt/compcap/x"], env=run.env, capture_output=True, text=True
    )
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied
    assert_no_errors(gateway)


def assert_no_errors(container: Container) -> None:
    """No error in the gateway's log (the state store written: no "probe heartbeat failed")."""
    logs = container.logs()
    assert '"level":"error"' not in logs and "heartbeat failed" not in logs, logs[-3000:]


def test_captions_are_the_pins_of_the_in_process_engine(gateway: Container) -> None:
    from service.manifest import load_manifest
    from tests.pins import PINNED, REPO, checked, pin_images

    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    images = [png(im) for im in pin_images(pinned, load_manifest(REPO))]
    cases = pinned["cases"]
    url = gateway.url

    def post(options: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{url}/v1/captions", json={"images": images, **options}, timeout=300, trust_env=False)
        assert r.status_code == 200, r.text
        return dict(r.json())

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, [c["options"] for c in cases]))
    wrong = []
    for n, i in checked(pinned):
        got = answers[n]["results"][i]
        original = got.get("original_captions")
        have = (
            [c["tokens"] for c in got["captions"]],
            None if original is None else [c["tokens"] for c in original],
        )
        want = (cases[n]["captions"][i], None if cases[n]["original"] is None else cases[n]["original"][i])
        if have != want:
            wrong.append((n, i, cases[n]["options"]))
    assert wrong == [] and len(checked(pinned)) >= 170


def test_the_healthcheck_is_healthy(gateway: Container) -> None:
    out = gateway.run("healthcheck", "run", gateway.id)
    assert "unhealthy" not in out


def active_requests(url: str) -> float:
    """The gateway's ``compcap_active_requests`` summed over its models (0 when unreadable)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5, trust_env=False).text
    except httpx.HTTPError:
        return 0.0
    rows = [line for line in text.splitlines() if line.startswith("compcap_active_requests{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in rows)


def test_sigterm_answers_the_requests_in_flight_then_exits_0(gateway: Container) -> None:
    image = png(np.random.default_rng(2).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    url = gateway.url

    def post(_: int) -> int:
        r = httpx.post(
            f"{url}/v1/captions", json={"images": [image] * 4, "beam_size": 100}, timeout=120, trust_env=False
        )
        return r.status_code

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post, k) for k in range(8)]
        # the signal goes once the gateway says it is decoding (8 requests of 4 images at beam 100 take
        # seconds); how many are still open then depends on the machine's speed, not on the gateway
        deadline = time.monotonic() + 60
        while not active_requests(url) and not all(f.done() for f in futures):
            assert time.monotonic() < deadline, "the gateway never reported a request in flight"
            time.sleep(0.02)
        open_at_signal = sum(not f.done() for f in futures)
        assert open_at_signal, "every request ended before the signal (make them longer)"
        gateway.run("stop", "--time", "60", gateway.id, timeout=90)  # SIGTERM, then wait for the exit
        codes = [f.result(timeout=60) for f in futures]
    assert codes == [200] * 8, f"{open_at_signal} open at the signal: {codes}"
    state = gateway.state()
    assert not state["Running"] and state["ExitCode"] == 0, (state, gateway.logs()[-3000:])


def test_an_arbitrary_uid_in_group_0_writes_its_state(run: Run, serve_image: str, tmp_path: Path) -> None:
    with started(run, serve_image, *SECURE, "--user", "12345:0", "-v", "uid-state:/var/lib/compcap") as c:
        c.wait_ready()
        with SAMPLES[1].open("rb") as f:
            r = httpx.post(f"{c.url}/v1/captions", files={"image": f}, timeout=30, trust_env=False)
        assert r.status_code == 200, r.text
        listing = run("exec", c.id, "ls", "-ln", "/var/lib/compcap")
        assert "compcap_state.db" in listing and " 12345 " in listing, listing
        assert_no_errors(c)
