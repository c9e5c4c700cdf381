"""Fixtures shared by the scheduler tests."""

from __future__ import annotations

from typing import Any

import pytest

import service.engine.scheduler as scheduler_module
from service.engine.request import Request


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
