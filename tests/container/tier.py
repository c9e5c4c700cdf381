"""The container tier's machinery: real podman (``scripts/podman_env.sh`` installs it from the OS's
packages where it is absent) with the project's ``scripts/containers.conf``, and a storage of its own for
every run.

Each run (one pytest session) keeps everything it makes — images, the build's cached layers, containers,
volumes — in ``RUNS/<pid>/`` (``storage.conf`` there, passed as ``CONTAINERS_STORAGE_CONF``),
which sees the cached base images of ``make base-image`` read-only (an additional image store: the
system's storage). Teardown removes the run's containers and volumes, then the directory: nothing it
made survives it, a failing run included. A run killed outright (SIGKILL) leaves its directory; the next
run sweeps every directory whose process is gone (``sweep``). The tier creates no network: its
containers and its builds' RUN steps use the host's (``HOST_NETWORK``), a gateway on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "scripts" / "containers.conf"
# short: with a runroot path over 50 characters every attached `podman run` waits 20 s (podman 4.3)
RUNS = Path(os.environ.get("COMPCAP_CONTAINER_RUNS", "/var/tmp/cctier"))
BUILD_TIMEOUT_S = 900
# the figures of the targets, printed at the end of the run (conftest.pytest_terminal_summary)
FIGURES: dict[str, Any] = {}
LEFTOVERS: list[str] = []
# the images a run builds, in its own storage
SERVE = "localhost/compcap-gateway:tier-cpu"
TRITON = "localhost/compcap-gateway:tier-triton"
GPU = "localhost/compcap-gateway:tier-gpu"
PROBESETS = "localhost/compcap-probesets:tier"


def sh(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        output = done.stdout[-3000:] + done.stderr[-3000:]
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}:\n{output}")
    return done.stdout


def podman_env(storage_conf: Path | None = None, conf: Path = CONF) -> dict[str, str]:
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    env.pop("CONTAINERS_STORAGE_CONF", None)
    if storage_conf is not None:
        env["CONTAINERS_STORAGE_CONF"] = str(storage_conf)
    return env


# The tier's containers (and its builds' RUN steps) share the host's network namespace: on the default
# bridge network, netavark creates its bridge, with an address, for the first container and deletes it
# after the last, and a browser the other tiers drive beside this one reads each such change as a network
# change and fails its page loads (net::ERR_NETWORK_CHANGED, seen in CI). So no -p: a gateway listens on a
# free loopback port of the host (COMPCAP_HOST, COMPCAP_PORT).
HOST_NETWORK = '\n[containers]\nnetns = "host"\n'


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cannot_run_containers() -> str | None:
    """Why this machine cannot run the tier's containers at all (the check that decided it), or None.
    Installs podman from the OS's packages where it is absent and the machine allows it."""
    if os.geteuid() != 0:
        return (
            "not root: the tier runs podman as root (scripts/containers.conf, a storage of its own beside "
            "the system's)"
        )
    done = subprocess.run(
        ["bash", "-c", ". scripts/podman_env.sh && ensure_podman"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        return f"no podman: {last_line(done.stderr) or 'ensure_podman failed'}"
    unshare = subprocess.run(
        ["unshare", "--mount", "--pid", "--net", "--uts", "--ipc", "--fork", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if unshare.returncode != 0:
        return f"no namespaces: unshare --mount --pid --net --uts --ipc fails ({unshare.stderr.strip()})"
    info = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if info.returncode != 0:
        return f"podman info fails: {last_line(info.stderr)}"
    return None


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def base_images() -> dict[str, str]:
    """``make base-image``: PYTHON_IMAGE and BUILD_IMAGE, built into the system's storage or found cached."""
    out = sh(["bash", str(ROOT / "scripts" / "base_image.sh")], env=podman_env(), timeout=900)
    refs = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert set(refs) == {"PYTHON_IMAGE", "BUILD_IMAGE"}, out
    return refs


def system_images() -> set[str]:
    """The images of the system's storage a run could have made there by mistake: the untagged ones (a
    build's cached layers) and those under the names a run gives its images (``compcap-*:tier*``,
    ``compcap-tier-*``). A run must leave them as it found them; other images (another user's) do not
    count."""
    out = sh(
        ["podman", "images", "--all", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"],
        env=podman_env(),
    )
    found = set()
    for line in out.splitlines():
        image, _, name = line.partition(" ")
        if name in ("<none>:<none>", "") or ":tier" in name or "compcap-tier-" in name:
            found.add(image)
    return found


def process_start(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class Run:
    """One run's podman: its own storage under ``path``."""

    path: Path
    bases: dict[str, str]  # PYTHON_IMAGE and BUILD_IMAGE (base_images)
    made: list[str] = field(default_factory=list)  # containers started, for the record

    @classmethod
    def create(cls, bases: dict[str, str]) -> Run:
        RUNS.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        path = RUNS / str(pid)
        if path.exists():  # a dead run's, under a reused pid
            remove(path)
        staging = RUNS / f".{pid}"  # renamed into place with its owner: a sweep never sees it half made
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        (staging / "owner").write_text(f"{process_start(pid)}\n")
        staging.rename(path)
        system_root = sh(["podman", "info", "--format", "{{.Store.GraphRoot}}"], env=podman_env()).strip()
        (path / "storage.conf").write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{path / "storage"}"\n'
            f'runroot = "{path / "run"}"\n'
            "[storage.options]\n"
            "# the system's storage, read-only: the cached base images of make base-image\n"
            f'additionalimagestores = ["{system_root}"]\n'
        )
        conf = CONF.read_text(encoding="utf-8")
        assert "netns" not in conf, "the tier sets the network namespace itself"
        (path / "containers.conf").write_text(conf.replace("\n[containers]\n", HOST_NETWORK, 1))
        return cls(path, bases)

    @property
    def env(self) -> dict[str, str]:
        return podman_env(self.path / "storage.conf", self.path / "containers.conf")

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        return sh(["podman", *args], env=self.env, timeout=timeout, check=check)

    def image(self, ref: str) -> dict[str, Any]:
        out: list[dict[str, Any]] = json.loads(self("image", "inspect", ref))
        return out[0]

    def image_exists(self, ref: str) -> bool:
        done = subprocess.run(["podman", "image", "exists", ref], env=self.env, check=False)
        return done.returncode == 0

    def build(self, *args: str, context: Path, last: bool = True) -> str:
        """scripts/build_image.sh in this run's storage: the image ID (``last``), else all it printed."""
        script = str(ROOT / "scripts" / "build_image.sh")
        out = sh(  # niced: the other test tiers run beside this one (scripts/test_tiers.sh)
            ["nice", "-n", "10", "bash", script, "--context", str(context), *args],
            env={**self.env, **self.bases},
            timeout=BUILD_TIMEOUT_S,
        )
        return out.split()[-1] if last else out

    def start(self, image: str, *args: str, command: list[str] | None = None) -> Container:
        """``podman run -d`` on the host's network, the gateway on a free loopback port (``HOST_NETWORK``)."""
        port = free_port()  # after the caller's options: a rendered pod's COMPCAP_HOST/PORT do not apply here
        where = ("-e", "COMPCAP_HOST=127.0.0.1", "-e", f"COMPCAP_PORT={port}")
        cid = self("run", "-d", *args, *where, image, *(command or [])).split()[-1]
        self.made.append(cid)
        return Container(self, cid, port)

    def teardown(self) -> None:
        remove(self.path)


@dataclass
class Container:
    run: Run
    id: str
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return sh(["podman", "logs", self.id], env=self.run.env, check=False)

    def state(self) -> dict[str, Any]:
        out: list[dict[str, Any]] = json.loads(self.run("inspect", self.id))
        return dict(out[0]["State"])

    def wait_ready(self, timeout_s: float = 60) -> None:
        import httpx  # here: make clean-images sweeps with this module on any Python

        deadline = time.monotonic() + timeout_s
        url = self.url
        while True:
            if not self.state()["Running"]:
                raise AssertionError(f"the container exited:\n{self.logs()[-4000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=1.0, trust_env=False).is_success:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready in {timeout_s:.0f} s:\n{self.logs()[-4000:]}")
            time.sleep(0.1)

    def memory_bytes(self) -> int:
        """podman stats' memory use (the cgroup's usage less its page cache)."""
        stats = json.loads(self.run("stats", "--no-stream", "--format", "json", self.id))
        return parse_size(stats[0]["mem_usage"].split("/")[0])

    def remove(self) -> None:
        self.run("rm", "--force", "--time", "0", self.id, check=False)


def parse_size(text: str) -> int:
    """``110.7MB`` (podman's decimal units) as bytes."""
    text = text.strip()
    units = {"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(float(text))


def remove(path: Path) -> None:
    """Remove a run's containers (the build's working containers too), volumes and storage."""
    conf = path / "storage.conf"
    if conf.is_file():
        env = podman_env(conf)
        external = sh(["podman", "ps", "--all", "--external", "--quiet"], env=env, check=False).split()
        if external:
            sh(["podman", "rm", "--force", "--time", "0", *external], env=env, check=False)
        sh(["podman", "volume", "rm", "--all", "--force"], env=env, check=False)
    # anything still mounted under the run (an interrupted build) is unmounted before the directory goes
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{path}/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # a file busy a moment ago
        time.sleep(1)
        shutil.rmtree(path)


def sweep() -> list[Path]:
    """Remove the directories of runs whose process is gone (a run killed before its teardown)."""
    swept = []
    for path in sorted(RUNS.iterdir()) if RUNS.is_dir() else []:
        if path.name.startswith("."):
            continue
        with contextlib.suppress(OSError):
            start = (path / "owner").read_text().strip()
            if path.name.isdigit() and process_start(int(path.name)) == start:
                continue  # a run in progress
        remove(path)
        swept.append(path)
    return swept


def leftovers(path: Path) -> list[str]:
    """What a removed run left: its directory, mounts under it, processes (conmon, the containers) that
    name it."""
    found = []
    if path.exists():
        found.append(f"directory {path}")
    found += [
        f"mount {line.split()[1]}"
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(f"{path}/")
    ]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if str(path).encode() in (proc / "cmdline").read_bytes():
                    found.append(f"process {proc.name}")
    return found


def snapshot_context(dest: Path) -> Path:
    """A copy of the build context as podman would send it (.dockerignore applied): the tier builds from
    it, not from the working tree others may be editing."""
    from tests.ops.test_container import ignored

    def copy(src: Path, rel: str) -> None:
        for entry in sorted(src.iterdir()):
            name = f"{rel}/{entry.name}" if rel else entry.name
            if ignored(name):
                continue
            target = dest / name
            try:
                if entry.is_dir() and not entry.is_symlink():
                    target.mkdir(parents=True, exist_ok=True)
                    copy(entry, name)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(entry, target)
            except FileNotFoundError:  # moved away while copying (others edit the tree)
                continue

    dest.mkdir(parents=True, exist_ok=True)
    copy(ROOT, "")
    shutil.copy2(ROOT / ".dockerignore", dest / ".dockerignore")
    return dest


@contextlib.contextmanager
def started(run: Run, image: str, *args: str, command: list[str] | None = None) -> Iterator[Container]:
    container = run.start(image, *args, command=command)
    try:
        yield container
    finally:
        container.remove()
