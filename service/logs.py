"""Process logging: human-readable lines on a terminal, one JSON object per line otherwise
(``COMPCAP_LOG_FORMAT=auto``, the default; ``json`` or ``text`` choose one whatever stderr is).

A record's ``extra`` fields become keys of its JSON object (``key=value`` after a text line); the
request log (``compcap.access``, written by ``service.api.requestlog``) uses that for request id, route,
status, latency and model.

``LogSettings`` is the logs' section of the settings (``COMPCAP_LOG_FORMAT``, ``COMPCAP_LOG_LEVEL``): every
process reads it, the gateway's and the engine core's."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import signal
import sys
import time
from types import FrameType
from typing import Any, ClassVar, Literal, TextIO

from pydantic import Field

from service.sections import Section

# attributes every LogRecord has; anything else on a record came from ``extra=``
# (uvicorn adds ``color_message``, its message with terminal colour codes: not for a JSON log)
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., **extra}``; exceptions under ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        body.update(_extra(record))
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``12:00:01 INFO    compcap.access: message key=value ...`` (local time), then any traceback."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={v}" for k, v in _extra(record).items())
        if not extra:
            return line
        head, sep, rest = line.partition("\n")  # the traceback, if any, stays below
        return f"{head} {extra}{sep}{rest}"


def resolve_format(fmt: str, stream: TextIO | None = None) -> str:
    """``json`` or ``text``: ``auto`` is text when ``stream`` (stderr) is a terminal."""
    if fmt != "auto":
        return fmt
    stream = sys.stderr if stream is None else stream
    return "text" if stream.isatty() else "json"


class _RecordQueueHandler(logging.handlers.QueueHandler):
    """Hands the record to the queue as it is: formatting and writing happen in the listener's thread
    (``QueueHandler.prepare`` would format it in the caller's: the event loop)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


_listener: logging.handlers.QueueListener | None = None


def stop_log_thread() -> None:
    """Write what is queued and stop the log thread (at exit, or before logging is configured again)."""
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


atexit.register(stop_log_thread)  # once: a queued log is written at exit, whoever configured it


def write_log_then_die(signum: int, frame: FrameType | None) -> None:
    """A handler for SIGTERM: a signal's default action skips ``atexit``, so the log thread's queue is
    written first, then the process dies of the signal. ``compcap serve`` installs it: uvicorn raises
    the SIGTERM it drained for again once it has shut down, and the shutdown's lines were lost."""
    stop_log_thread()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def configure_logging(fmt: str = "auto", level: str = "info", queued: bool = False) -> None:
    """Route every logger (uvicorn's included) through one stderr handler in ``fmt`` (auto, json, text).

    ``queued`` (the gateway): a record is put on a queue, and one thread formats and writes it, so the
    event loop spends no time on the request log's JSON and the write to stderr; what is queued is
    written at exit."""
    stop_log_thread()
    handler: logging.Handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if resolve_format(fmt) == "json" else TextFormatter())
    if queued:
        global _listener
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        _listener = logging.handlers.QueueListener(records, handler)
        _listener.start()
        handler = _RecordQueueHandler(records)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


class LogSettings(Section):
    """The logs' section: their format and least level, read by every process (``configure_logging``)."""

    title: ClassVar[str] = "Logs"

    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="json: one JSON object per log line (one per request from compcap.access); text: "
        "human-readable lines; auto: text when stderr is a terminal, else json",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the least severe log lines written"
    )


__all__ = ["JsonFormatter", "LogSettings", "TextFormatter", "configure_logging", "resolve_format"]
