"""``compcap-lab evaluate --url``: the evaluation's captions decoded by a deployed gateway over HTTP
(``compcap_client.AsyncCompCapClient``), then scored by the same code as in process
(``compcap_lab.studies.evaluate``).

- The runs come from the gateway's ``GET /v1/models``: its captioners, each one's own ranker
  (``default_ranker``), the rankers served (``vsepp`` as the fallback) and what each captioner was
  trained on (``training.split``) — all ``evaluate`` reads from a manifest, so no ``--repo`` is needed.
- One ``POST /v1/captions`` per (run, image), with ``run_options`` — the very options the in-process
  evaluation resolves: a re-ranked run asks for ``beam_size = rerank_beam_size`` and
  ``n_best = beam_size``. The image file is sent as it is on disk; the gateway decodes and resizes it
  with ``service.images.decode.decode_image``, the function ``load_images`` uses, so both paths see the same
  pixels. At most ``concurrency`` requests are in flight (the gateway batches their decoder steps).
- A checkpoint (JSON lines) holds one line per (captioner, ranker, image_id) with the options and the
  captions, appended with one ``write`` as each request completes. On start the lines already there
  are loaded and their images skipped; a torn last line (the process was killed mid-write) is cut off
  before anything is appended; a complete line that does not parse, or one written with other
  options, is an error (pass another file). Keys are never written twice, and an exclusive lock
  (``flock``) keeps a second run off the same file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compcap_client import AsyncCompCapClient, CompCapClient, CompCapError
from compcap_lab.studies.runs import run_options
from export.packaging.runs import Catalogue
from service.checks import at_least

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS: no lock
    fcntl = None  # type: ignore[assignment]

Key = tuple[str, str | None, int]
REQUEST_TIMEOUT_S = 600.0  # the gateway's own deadline (COMPCAP_REQUEST_DEADLINE_S) answers first


def gateway_catalogue(url: str, api_key: str | None = None) -> Catalogue:
    """The runs' makings from the gateway's ``GET /v1/models``."""
    with CompCapClient(url, api_key=api_key) as client:
        models = client.models()
    return Catalogue(
        tuple((c.name, c.default_ranker, c.trained_on) for c in models.captioners),
        frozenset(r.name for r in models.rankers),
    )


class Checkpoint:
    """A JSON-lines file of finished (captioner, ranker, image_id) captions, opened for appending and
    locked. ``done`` holds what the file held on opening plus what was appended since."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ValueError(f"checkpoint {self.path} is in use by another run") from None
            self.done: dict[Key, dict[str, Any]] = self._load()
        except BaseException:
            os.close(self._fd)
            raise

    def _load(self) -> dict[Key, dict[str, Any]]:
        with open(self.path, "rb") as f:
            data = f.read()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):  # killed mid-write: the tail is no line
            print(
                f"warning: {self.path}: ignored a torn last line ({len(data) - complete} bytes)",
                file=sys.stderr,
            )
            os.ftruncate(self._fd, complete)
        done: dict[Key, dict[str, Any]] = {}
        for number, line in enumerate(data[:complete].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                key = (str(entry["captioner"]), entry["ranker"], int(entry["image_id"]))
                if not isinstance(entry["captions"], list):
                    raise TypeError("captions is not a list")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"checkpoint {self.path} line {number} is not a checkpoint line: {exc}"
                ) from None
            done.setdefault(key, entry)  # the first line of a key wins; appends never repeat one
        return done

    def append(self, key: Key, options: dict[str, Any], captions: list[str]) -> None:
        if key in self.done:
            raise ValueError(f"checkpoint {self.path} already holds {key}")
        entry = {
            "captioner": key[0],
            "ranker": key[1],
            "image_id": key[2],
            "options": options,
            "captions": captions,
        }
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        os.write(
            self._fd, line.encode("utf-8")
        )  # one write on an O_APPEND descriptor: a whole line or a torn tail
        self.done[key] = entry

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases the lock
            self._fd = -1


class _Memory:
    """No checkpoint file: the same interface, in memory."""

    def __init__(self) -> None:
        self.done: dict[Key, dict[str, Any]] = {}

    def append(self, key: Key, options: dict[str, Any], captions: list[str]) -> None:
        self.done[key] = {"options": options, "captions": captions}

    def close(self) -> None:
        pass


def decode_remote(
    url: str,
    images: Sequence[tuple[int, Path]],
    runs: Sequence[tuple[str, str | None]],
    beam_size: int,
    rerank_beam_size: int,
    rerank_weight: float,
    *,
    concurrency: int = 8,
    checkpoint: Path | None = None,
    api_key: str | None = None,
) -> list[list[list[str]]]:
    """Per run, per image (in ``images`` order), the top ``beam_size`` caption texts in final order,
    decoded by the gateway at ``url``; (run, image) pairs already in ``checkpoint`` are not sent again."""
    at_least(1, concurrency=concurrency)
    store: Checkpoint | _Memory = Checkpoint(checkpoint) if checkpoint is not None else _Memory()
    try:
        options = {run: run_options(run[1], beam_size, rerank_beam_size, rerank_weight) for run in runs}
        wanted = {(cap, rk, image_id) for cap, rk in runs for image_id, _ in images}
        for key, entry in store.done.items():
            if key in wanted and entry.get("options") != options[key[0], key[1]]:
                raise ValueError(
                    f"checkpoint {checkpoint} holds {key[0]}+{key[1] or 'none'} image {key[2]} decoded with "
                    f"{entry.get('options')}, not {options[key[0], key[1]]}: pass another --checkpoint"
                )
        todo = [
            (cap, rk, image_id, path)
            for cap, rk in runs
            for image_id, path in images
            if (cap, rk, image_id) not in store.done
        ]
        asyncio.run(_fetch(url, todo, options, store, len(wanted), concurrency, api_key))
        return [
            [list(store.done[cap, rk, image_id]["captions"]) for image_id, _ in images] for cap, rk in runs
        ]
    finally:
        store.close()


async def _fetch(
    url: str,
    todo: list[tuple[str, str | None, int, Path]],
    options: dict[tuple[str, str | None], dict[str, Any]],
    store: Checkpoint | _Memory,
    total: int,
    concurrency: int,
    api_key: str | None,
) -> None:
    queue: asyncio.Queue[tuple[str, str | None, int, Path]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async def worker(client: AsyncCompCapClient, bar: tqdm[Any]) -> None:
        while True:
            try:
                cap, rk, image_id, path = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            run = options[cap, rk]
            out = await client.caption([path.read_bytes()], model=cap, **run)
            if out.model != cap or out.ranker != rk or out.n_best != run["n_best"]:
                raise CompCapError(
                    0,
                    "unexpected_answer",
                    f"asked {cap}+{rk or 'none'} n_best={run['n_best']}, the gateway answered "
                    f"{out.model}+{out.ranker or 'none'} n_best={out.n_best}",
                )
            store.append((cap, rk, image_id), run, out.results[0].texts)
            bar.update(1)

    async with AsyncCompCapClient(
        url, api_key=api_key, timeout=REQUEST_TIMEOUT_S, max_connections=concurrency
    ) as client:
        with tqdm(total=total, initial=total - len(todo), desc=f"decode via {url}", unit="img") as bar:
            try:
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(concurrency, len(todo))):
                        group.create_task(worker(client, bar))
            except ExceptionGroup as failed:  # the first failure, as itself (CompCapError, OSError, ...)
                raise failed.exceptions[0] from None


__all__ = ["Checkpoint", "decode_remote", "gateway_catalogue"]
