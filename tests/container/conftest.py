"""The container tier (``make test-container``; part of ``make test``): the gateway's image built with
real podman on the local base image (``make base-image``), run as an operator runs it, and every container,
image and volume it made removed afterwards, also after a failure (``tests/container/tier.py``).

The tier is skipped, with one line saying which check decided it, only where this machine cannot run
containers at all (``tier.cannot_run_containers``, at collection: not root, no podman and no way to
install it, no namespaces, ``podman info`` failing). The figures of the issue's targets (image size,
``podman run`` → first caption, memory after it, build times, leftovers) are printed at the end of the
run."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.container import tier
from tests.container.tier import FIGURES, LEFTOVERS, PROBESETS, SERVE, TRITON, Run

HERE = Path(__file__).parent
SKIPPED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "container: builds and runs the images with real podman")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where the machine cannot run containers, the tier's tests are left out with one line saying why
    (at the end of the run), instead of one skip per test."""
    ours = [item for item in items if item.path.is_relative_to(HERE)]
    if not ours:
        return
    reason = tier.cannot_run_containers()
    if reason is None:
        return
    items[:] = [item for item in items if not item.path.is_relative_to(HERE)]
    config.hook.pytest_deselected(items=ours)
    SKIPPED.append(f"container tier: {len(ours)} skipped: the machine cannot run containers: {reason}")


@pytest.fixture(scope="session")
def run() -> Iterator[Run]:
    """This run's podman (its own storage); removed, with all it holds, at the end of the session."""
    start = time.monotonic()  # after collection: tier.cannot_run_containers() said it can
    tier.sweep()
    before = tier.system_images()
    bases = tier.base_images()
    FIGURES["base"] = bases
    current = Run.create(bases)
    try:
        yield current
    finally:
        current.teardown()
        left = tier.leftovers(current.path)
        left += [f"image {i} in the system's storage" for i in sorted(tier.system_images() - before)]
        LEFTOVERS.extend(left)
        FIGURES["leftovers"] = len(left)
        FIGURES["tier_s"] = time.monotonic() - start


@pytest.fixture(scope="session")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build context, copied once (others may be editing the working tree)."""
    return tier.snapshot_context(tmp_path_factory.mktemp("context"))


@pytest.fixture(scope="session")
def serve_image(run: Run, context: Path) -> str:
    """The CPU gateway image (VARIANT=serve) on the local base, built by scripts/build_image.sh."""
    start = time.monotonic()
    image = run.build("--tag", SERVE, context=context)
    FIGURES["build_serve_s"] = time.monotonic() - start
    return image


@pytest.fixture(scope="session")
def triton_image(run: Run, context: Path) -> str:
    """The Triton variant (VARIANT=serve-triton): built, not run (no Triton here)."""
    start = time.monotonic()
    image = run.build("--variant", "serve-triton", "--tag", TRITON, context=context)
    FIGURES["build_triton_s"] = time.monotonic() - start
    return image


@pytest.fixture(scope="session")
def probeset_repo(
    run: Run, serve_image: str, context: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of the image's model repository with probe sets, by the image's own ``compcap probesets``
    (one kind at the tiny sizes: seconds)."""
    repo = tmp_path_factory.mktemp("probesets") / "model_repo"
    shutil.copytree(context / "model_repo", repo)
    run(
        "run", "--rm", "--user", "0", "-v", f"{repo.parent}:/work", "--entrypoint", "compcap", serve_image,
        "probesets", "--repo", "/work/model_repo", "--kind", "systematicity", "--preset", "tiny",
        timeout=600,
    )  # fmt: skip
    return repo


@pytest.fixture(scope="session")
def probesets_image(run: Run, probeset_repo: Path) -> str:
    """compcap-probesets (k8s/components/probesets/Dockerfile) on the local base."""
    return run.build("--probesets", "--tag", PROBESETS, context=probeset_repo)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if LEFTOVERS and session.exitstatus == 0:
        session.exitstatus = 1
    if SKIPPED and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK  # the tier skipped, saying why: not a failure


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in SKIPPED:
        terminalreporter.write_line(line)
    if not FIGURES.get("tier_s"):
        return
    parts = []
    if "image_mb" in FIGURES:
        parts.append(f"image {FIGURES['image_mb']:.0f} MB ({FIGURES.get('image_layers', '')})")
    if "first_caption_s" in FIGURES:
        parts.append(f"podman run -> first caption {FIGURES['first_caption_s']:.2f} s")
    if "memory_mb" in FIGURES:
        parts.append(f"memory after it {FIGURES['memory_mb']:.0f} MB")
    for key, name in (
        ("build_serve_s", "serve build"),
        ("rebuild_s", "code-change rebuild"),
        ("build_triton_s", "triton build"),
        ("gpu", "gpu variant"),
    ):
        if key in FIGURES:
            value = FIGURES[key]
            parts.append(f"{name} {value:.0f} s" if isinstance(value, float) else f"{name}: {value}")
    parts.append(f"tier {FIGURES['tier_s'] / 60:.1f} min")
    parts.append(f"left behind {FIGURES['leftovers']}")
    terminalreporter.write_line("container tier: " + ", ".join(parts))
    for line in LEFTOVERS:
        terminalreporter.write_line(f"container tier: LEFT BEHIND {line}")
