"""What the import tests of every architecture check the same way: no connection leaves the machine,
a refused import leaves the repository byte-identical, the engine's captions are ``generate()``'s."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

NEAR_TIE = 1e-4


def refuse_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection to an address other than loopback fails, as it would on a machine offline."""
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if (
            isinstance(host, str)
            and host not in ("127.0.0.1", "::1", "localhost")
            and self.family != socket.AF_UNIX
        ):
            raise OSError(f"network refused by the test: {address}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def tree_digest(root: Path) -> str:
    """One hash of every file's path and bytes under ``root``."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def generate_differences(
    results: Sequence[Sequence[Any]], ref: Any, beams: int, n_best: int, end: int, pad: int | None = None
) -> tuple[list[tuple[Any, ...]], list[list[int]]]:
    """The engine's captions (per image, ``n_best`` each) against ``generate()``'s output ``ref``
    (``num_return_sequences=n_best``): the captions whose tokens or score differ, as (image, rank,
    ours, theirs, our score, theirs), and generate's rows after its start token."""
    differences, rows = [], []
    for i, per_image in enumerate(results):
        assert len(per_image) == n_best
        for j, caption in enumerate(per_image):
            row = ref.sequences[i * n_best + j, 1:].tolist()
            rows.append(row)
            theirs = row[: row.index(end)] if end in row else list(row)  # up to its end token
            while pad is not None and theirs and theirs[-1] == pad:  # generate pads shorter rows
                theirs.pop()
            score = float(ref.sequences_scores[i * n_best + j]) if beams > 1 else caption.normalized_logprob
            if caption.tokens != theirs or abs(caption.normalized_logprob - score) > NEAR_TIE:
                differences.append((i, j, caption.tokens, theirs, caption.normalized_logprob, score))
    return differences, rows


def assert_near_ties(differences: list[tuple[Any, ...]], total: int) -> None:
    """At most 5% of the captions differ, and each one at a near-tie (scores within ``NEAR_TIE``)."""
    assert len(differences) <= 0.05 * total, differences
    for diff in differences:
        assert abs(diff[4] - diff[5]) <= NEAR_TIE, diff
