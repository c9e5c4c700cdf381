"""The compositional ranker's tests share one small world (``scenes.make_world``)."""

from __future__ import annotations

import pytest

from tests.unit.lab_compositional.scenes import World, make_world


@pytest.fixture(scope="session")
def world() -> World:
    return make_world()
