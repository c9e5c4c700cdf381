"""The probe history: one JSON line per succeeded probe job, appended and flushed when it ends, read
back at start-up so a restarted gateway serves its last results (gauges and ``GET /v1/probes``).
An operator's acceptance of a result (the baseline alerts compare with) is a line of its own, marked
``"event": "accepted"``. A torn last line (the process killed mid-write) is skipped."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ProbeHistory:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def read(self) -> list[dict[str, Any]]:
        """Every complete record, oldest first."""
        if not self.path.is_file():
            return []
        records = []
        with self.path.open(encoding="utf-8") as handle:
            for n, line in enumerate(handle, 1):
                try:
                    record = json.loads(line)
                except ValueError:
                    log.warning("%s line %d is not JSON (a torn write?); skipped", self.path, n)
                    continue
                if isinstance(record, dict):
                    records.append(record)
        return records

    def latest(self, event: str | None = None) -> list[dict[str, Any]]:
        """The last record of each (kind, model, ranker, probe set), oldest first: of the job results
        (``event`` None) or of the events of that name (``"accepted"``)."""
        last: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in self.read():
            if r.get("event") != event:
                continue
            p = r.get("params", {})
            last[(r.get("kind"), p.get("model"), p.get("rerank"), p.get("probe_set"))] = r
        key = "finished_at" if event is None else f"{event}_at"
        return sorted(last.values(), key=lambda r: r.get(key) or 0.0)


__all__ = ["ProbeHistory"]
