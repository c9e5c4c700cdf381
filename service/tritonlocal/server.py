"""``LocalTriton``: start, wait for and stop a real ``tritonserver`` serving a model repository on CPU.

The server binary, its python backend, the per-Python-version backend stubs and the shared libraries
come from the ``nvidia-pytriton`` wheel installed in ``.venv-triton`` (created with Debian's
``/usr/bin/python3.11``: the stub links Debian's ``libpython3.11``). As pytriton does, the server runs
with ``LD_LIBRARY_PATH`` on ``nvidia_pytriton.libs`` and the venv's ``bin`` first on ``PATH`` (the
embedded interpreter finds the venv's packages through its ``python3``). The stub is linked into a
backend directory of the work directory, next to the generated python-backend mirror.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from service.tritonlocal.repository import write_python_repository

ROOT = Path(__file__).resolve().parents[2]
VENV_ENV = "COMPCAP_TRITON_VENV"
PORT_IN_USE = ("address already in use", "failed to bind", "cannot listen")
METRICS_GRACE_S = 10.0  # HTTP ready, metrics still closed this long: their port was taken, launch again


def default_venv() -> Path:
    """``$COMPCAP_TRITON_VENV`` or ``.venv-triton`` at the project root."""
    return Path(os.environ.get(VENV_ENV) or ROOT / ".venv-triton")


@dataclass(frozen=True)
class TritonInstall:
    """Where the pytriton wheel keeps Triton inside a venv."""

    venv: Path
    server: Path
    python_backend: Path
    stub: Path
    libs: Path

    @classmethod
    def find(cls, venv: Path | None = None) -> TritonInstall:
        venv = (venv or default_venv()).absolute()
        packages = sorted(venv.glob("lib/python3.*/site-packages/pytriton/tritonserver"))
        if not packages:
            raise FileNotFoundError(
                f"no nvidia-pytriton in {venv} (create it with `make triton-venv`, or set {VENV_ENV})"
            )
        dist = packages[-1]
        version = dist.parents[2].name.removeprefix("python")  # lib/python3.11/site-packages
        install = cls(
            venv=venv,
            server=dist / "bin" / "tritonserver",
            python_backend=dist / "backends" / "python",
            stub=dist / "python_backend_stubs" / version / "triton_python_backend_stub",
            libs=dist.parents[1] / "nvidia_pytriton.libs",
        )
        for path in (install.server, install.python_backend, install.stub, install.libs):
            if not path.exists():
                raise FileNotFoundError(f"incomplete pytriton install in {venv}: no {path}")
        return install

    def backend_directory(self, work: Path) -> Path:
        """``work/backends/python``: the wheel's python backend plus the stub for the venv's Python."""
        backends = work / "backends"
        python = backends / "python"
        python.mkdir(parents=True, exist_ok=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            (python / name).symlink_to(self.python_backend / name)
        (python / "triton_python_backend_stub").symlink_to(self.stub)
        return backends

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        libs = [str(self.libs), *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
        env["LD_LIBRARY_PATH"] = ":".join(libs)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"
        for variable in ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(variable, None)
        return env


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the OS just handed out, all held open until every one is drawn (one at a
    time, a closed port can be handed out again at once: the server's HTTP and metrics ports once came
    out equal). Any may be taken again before the server binds it."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


class TritonError(RuntimeError):
    """The local server could not start or did not become ready."""


class LocalTriton:
    """A ``tritonserver`` process for ``repo``. Ports left at 0 are chosen at start (and re-chosen if
    one was taken meanwhile). ``work`` holds the mirror, the backend directory and ``tritonserver.log``;
    by default a temporary directory removed by ``stop()``. Use as a context manager or call
    ``start()``, ``wait_ready()`` and, always, ``stop()``."""

    def __init__(
        self,
        repo: str | Path,
        *,
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        host: str = "127.0.0.1",
        work: str | Path | None = None,
        venv: str | Path | None = None,
        intra_op_threads: int = 1,
        log_verbose: int = 0,
    ) -> None:
        self.repo = Path(repo)
        self.host = host
        self._requested = (http_port, grpc_port, metrics_port)
        self.http_port, self.grpc_port, self.metrics_port = self._requested
        self._keep_work = work is not None
        self._work_arg = Path(work) if work is not None else None
        self.work: Path | None = None
        self.install = TritonInstall.find(Path(venv) if venv is not None else None)
        self.intra_op_threads = intra_op_threads
        self.log_verbose = log_verbose
        self.process: subprocess.Popen[bytes] | None = None
        self.models: list[str] = []
        self._log_file: Path | None = None
        self._backends: Path | None = None
        # python-backend regions in /dev/shm: unique, so servers side by side never share them and
        # stop() can remove what a killed stub leaves behind
        self.shm_prefix = f"compcap{os.getpid()}_{secrets.token_hex(4)}_"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def start(self) -> LocalTriton:
        """Generate the python-backend mirror and launch the server (does not wait)."""
        if self.process is not None:
            raise TritonError("already started")
        if self._work_arg is not None:
            self.work = self._work_arg
            self.work.mkdir(parents=True, exist_ok=True)
        else:
            self.work = Path(tempfile.mkdtemp(prefix="compcap-triton-"))
        self.models = write_python_repository(self.repo, self.work / "models", self.intra_op_threads)
        shutil.rmtree(self.work / "backends", ignore_errors=True)
        self._backends = self.install.backend_directory(self.work)
        self._log_file = self.work / "tritonserver.log"
        self._launch()
        return self

    def _launch(self) -> None:
        assert self.work is not None and self._log_file is not None and self._backends is not None
        drawn = iter(free_ports(3, self.host))
        self.http_port, self.grpc_port, self.metrics_port = (p or next(drawn) for p in self._requested)
        command = [
            str(self.install.server),
            f"--model-repository={self.work / 'models'}",
            f"--backend-directory={self._backends}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            "--allow-gpu-metrics=false",
            "--allow-cpu-metrics=true",
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--disable-auto-complete-config",
            "--pinned-memory-pool-byte-size=0",
            f"--log-verbose={self.log_verbose}",
            # a unique shared-memory prefix so servers started side by side never share stub regions
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]
        with self._log_file.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                env=self.install.environment(),
                cwd=self.work,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() also ends the backend stubs
            )

    def log_tail(self, chars: int = 4000) -> str:
        if self._log_file is None or not self._log_file.is_file():
            return ""
        return self._log_file.read_text(encoding="utf-8", errors="replace")[-chars:]

    def is_ready(self, timeout_s: float = 1.0) -> bool:
        """Whether ``/v2/health/ready`` answers 200 now and so does the metrics endpoint, which Triton
        opens after its HTTP service (``timeout_s``: how long each answer may take)."""
        http = _answers(f"{self.http_url}/v2/health/ready", timeout_s)
        return http and _answers(self.metrics_url, timeout_s)

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Seconds until ``/v2/health/ready`` answered 200 (all models loaded) and the metrics endpoint
        answers. Raises ``TritonError`` with the server's log if it exits or is not ready in time; a
        launch on drawn ports whose port another process took (the server exits, or serves HTTP but
        never its metrics) is tried again on new ports, twice."""
        if self.process is None:
            raise TritonError("not started")
        start = time.monotonic()
        retries = 2
        ephemeral = all(p == 0 for p in self._requested)  # else the clash is likely a fixed port
        serving_since: float | None = None  # when HTTP answered ready while the metrics did not
        while True:
            if self.process.poll() is not None:
                tail = self.log_tail()
                if retries > 0 and ephemeral and any(m in tail.lower() for m in PORT_IN_USE):
                    retries -= 1
                    self._launch()
                    continue
                raise TritonError(f"tritonserver exited with {self.process.returncode}:\n{tail}")
            if self.is_ready():
                return time.monotonic() - start
            if _answers(f"{self.http_url}/v2/health/ready", 1.0):
                serving_since = serving_since or time.monotonic()
                if retries > 0 and ephemeral and time.monotonic() - serving_since > METRICS_GRACE_S:
                    retries, serving_since = retries - 1, None
                    self._relaunch()
                    continue
            if time.monotonic() - start > timeout:
                raise TritonError(f"tritonserver not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the server (it unloads its models and ends their stubs), SIGKILL its whole process
        group after ``timeout`` and in any case once it has exited, remove its leftover shared-memory
        regions; idempotent."""
        process, self.process = self.process, None
        if process is not None:
            self._end(process, timeout)
        if self.work is not None and not self._keep_work:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def _end(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
        _signal_group(process.pid, signal.SIGKILL)  # stubs that outlived the server
        for leftover in Path("/dev/shm").glob(f"{self.shm_prefix}*"):
            with contextlib.suppress(OSError):
                leftover.unlink()

    def _relaunch(self) -> None:
        """End the running server (its work folder kept) and launch it again on newly drawn ports."""
        process, self.process = self.process, None
        if process is not None:
            self._end(process, 20.0)
        self._launch()

    def __enter__(self) -> LocalTriton:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _answers(url: str, timeout_s: float) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def serve_forever(triton: LocalTriton, ready_timeout: float = 120.0) -> int:
    """``compcap triton``: start, report the endpoints, run until SIGINT/SIGTERM or the server exits."""

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a shell's background job inherits it ignored, and Python then never raises on it
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        triton.start()
        seconds = triton.wait_ready(ready_timeout)
        print(
            f"tritonserver ready in {seconds:.1f} s with {len(triton.models)} models "
            f"({', '.join(triton.models)}): gRPC {triton.grpc_url}, HTTP {triton.http_url}, "
            f"metrics {triton.metrics_url}; log {triton.work}/tritonserver.log",
            flush=True,
        )
        assert triton.process is not None
        code = triton.process.wait()
        print(f"tritonserver exited with {code}:\n{triton.log_tail()}", flush=True)
        return code or 1
    except KeyboardInterrupt:
        return 0
    except TritonError as exc:
        print(f"compcap triton: {exc}", flush=True)
        return 1
    finally:
        triton.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
