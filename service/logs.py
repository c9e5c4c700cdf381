"""Process logging: one JSON object per line (``COMPCAP_LOG_FORMAT=json``, the default) or plain text.

A record's ``extra`` fields become keys of its JSON object; the request log (``compcap.access``,
written by ``service.api.requestlog``) uses that for request id, route, status, latency and model."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

# attributes every LogRecord has; anything else on a record came from ``extra=``
# (uvicorn adds ``color_message``, its message with terminal colour codes: not for a JSON log)
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


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
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, separators=(",", ":"))


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    """Route every logger (uvicorn's included) through one stderr handler in ``fmt``."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


__all__ = ["JsonFormatter", "configure_logging"]
