"""The gateway's log goes through a queue: the calling thread (the event loop) neither formats nor
writes a record; one log thread does, and what is queued is written when logging stops. And the
serving process freezes its collector once the models are loaded."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from service import logs


class _Recorder(logs.JsonFormatter):
    """The JSON formatter, noting which thread formatted each record."""

    threads: ClassVar[list[str]] = []

    def format(self, record: logging.LogRecord) -> str:
        self.threads.append(threading.current_thread().name)
        return super().format(record)


def test_queued_records_are_formatted_and_written_by_the_log_thread(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(logs, "JsonFormatter", _Recorder)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure_logging("json", "info", queued=True)
        logging.getLogger("compcap.access").info("request", extra={"route": "/v1/captions", "status": 200})
        logs.stop_log_thread()  # as at exit: what is queued is written
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["msg"] == "request" and line["route"] == "/v1/captions" and line["status"] == 200
    assert _Recorder.threads and threading.current_thread().name not in _Recorder.threads


def test_unqueued_logging_writes_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure_logging("json", "info")
        logging.getLogger("compcap.test").warning("now")
        assert json.loads(capsys.readouterr().err.strip().splitlines()[-1])["msg"] == "now"
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


FREEZE = """
import asyncio, gc, sys
from pathlib import Path
from typing import ClassVar
from service.api.deps import Runtime
from service.settings import Settings
runtime = Runtime(Settings(repo=Path(sys.argv[1]), state_url=""), freeze_gc={freeze})
asyncio.run(runtime.load())
print(runtime.ready, gc.get_freeze_count())
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_the_serving_runtime_freezes_the_collector_once_loaded(tiny_repo: Path, freeze: bool) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREEZE.format(freeze=freeze), str(tiny_repo)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    assert out[0] == "True"
    assert (int(out[1]) > 10_000) is freeze


DIE = """
import logging, signal, sys
from service import logs
logs.configure_logging("json", "info", queued=True)
if sys.argv[1] == "handler":
    signal.signal(signal.SIGTERM, logs.write_log_then_die)
for i in range(5000):
    logging.getLogger("compcap.test").info("line %d", i)
signal.raise_signal(signal.SIGTERM)  # as uvicorn does once it has shut down
"""


def test_sigterm_writes_the_queue_before_the_process_dies() -> None:
    """A signal's default action skips ``atexit``: without ``write_log_then_die`` the lines still queued
    when SIGTERM comes are lost (``compcap serve`` installs it; tests/integration/test_serve_process.py)."""
    done = subprocess.run([sys.executable, "-c", DIE, "handler"], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    lines = [json.loads(line)["msg"] for line in done.stderr.splitlines() if line.startswith("{")]
    assert lines == [f"line {i}" for i in range(5000)]
