"""Fixtures shared by the unit tests: the tiny repository's manifest and vocabulary, and the
scheduler tests' record of the requests it creates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import service.engine.scheduler as scheduler_module
from service.engine.request import Request
from service.manifest import Manifest, load_manifest
from service.text.vocabulary import Vocabulary


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """Every ``Request`` the scheduler creates, in submission order (read their statuses: there is no
    public way to see them)."""
    requests: list[Request] = []

    def record(**fields: Any) -> Request:
        requests.append(Request(**fields))
        return requests[-1]

    monkeypatch.setattr(scheduler_module, "Request", record)
    return requests


@pytest.fixture(scope="module")
def manifest(tiny_repo: Path) -> Manifest:
    return load_manifest(tiny_repo)


@pytest.fixture(scope="module")
def vocab(tiny_repo: Path, manifest: Manifest) -> Vocabulary:
    return Vocabulary.load(tiny_repo / manifest.vocabulary.file)
