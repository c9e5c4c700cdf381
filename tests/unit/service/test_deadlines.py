"""Each captioner's request deadline (``service.engine.deadlines``): the setting where set, else the base
or 30 single captions of a captioner that recorded one, whichever is longer; and the reason a 504 gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.engine.deadlines import (
    BASE_DEADLINE_S,
    DEADLINE_CAPTIONS,
    base_deadline_s,
    deadline_reason,
    request_deadline_s,
)
from service.engine.settings import EngineSettings
from service.manifest import CaptionerEntry, load_manifest


@pytest.fixture(scope="module")
def captioner(tiny_repo: Path) -> CaptionerEntry:
    return load_manifest(tiny_repo).captioners[0]


def _timed(captioner: CaptionerEntry, ms: float) -> CaptionerEntry:
    return captioner.model_copy(update={"single_caption_ms": ms})


def test_unset_a_measured_captioner_waits_its_captions(captioner: CaptionerEntry) -> None:
    settings = EngineSettings()
    assert settings.request_deadline_s is None
    assert request_deadline_s(settings, captioner) == BASE_DEADLINE_S  # nothing measured
    assert request_deadline_s(settings, None) == BASE_DEADLINE_S  # model not known yet
    assert request_deadline_s(settings, _timed(captioner, 20.0)) == BASE_DEADLINE_S  # fast: the base
    assert request_deadline_s(settings, _timed(captioner, 850.0)) == pytest.approx(DEADLINE_CAPTIONS * 0.85)
    assert base_deadline_s(settings) == BASE_DEADLINE_S


def test_the_setting_wins_for_every_captioner(captioner: CaptionerEntry) -> None:
    settings = EngineSettings(request_deadline_s=4.0)
    assert request_deadline_s(settings, _timed(captioner, 850.0)) == 4.0
    assert request_deadline_s(settings, captioner) == 4.0 == base_deadline_s(settings)
    assert deadline_reason(settings, captioner) == "COMPCAP_REQUEST_DEADLINE_S=4"


def test_the_reason_names_what_set_it(captioner: CaptionerEntry) -> None:
    settings = EngineSettings()
    measured = deadline_reason(settings, _timed(captioner, 850.0))
    assert f"30 times {captioner.name}'s single caption, 0.85 s when it was imported" in measured
    assert measured.endswith("set COMPCAP_REQUEST_DEADLINE_S to wait longer")
    assert deadline_reason(settings, _timed(captioner, 20.0)).startswith("the default;")
