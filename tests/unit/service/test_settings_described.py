"""Every setting has a description (the settings reference page shows it), found by walking the
settings model, each section and any nested model; the page shows types as a user reads them, and
every setting in the table of the one section that declares it."""

from __future__ import annotations

import importlib.util
import re
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from service.sections import Section
from service.settings import SECTIONS, Settings

ROOT = Path(__file__).resolve().parents[3]


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models inside ``annotation`` (``Model``, ``Model | None``, ``list[Model]``, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def _sections(cls: type[Section]) -> Iterator[type[Section]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _sections(sub)


def undescribed(model: type[BaseModel], prefix: str = "", seen: set[type] | None = None) -> list[str]:
    """``prefix.field`` of every field of ``model`` and its nested models without a description."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    missing = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(f"{prefix}{model.__name__}.{name}")
        for nested in _models(field.annotation):
            missing += undescribed(nested, f"{prefix}{model.__name__}.{name}: ", seen)
    return missing


def test_every_setting_has_a_description() -> None:
    missing: list[str] = []
    seen: set[type] = set()
    models: list[type[BaseModel]] = [Settings, *_sections(Section)]
    for model in models:
        missing += undescribed(model, seen=seen)
    assert missing == [], f"settings without a description: {missing}"


def test_the_walk_finds_an_undescribed_setting_and_nested_model() -> None:
    class Inner(BaseModel):
        ok: int = 0

    class Probe(BaseModel):  # not a Section: it would join the sections the other test walks
        described: int = Field(default=0, description="present")
        nested: Inner | None = None

    assert undescribed(Probe) == ["Probe.nested", "Probe.nested: Inner.ok"]


def test_the_reference_page_shows_human_types() -> None:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    gen_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_docs)
    page = gen_docs.settings_page()
    rows = [line for line in page.splitlines() if line.startswith("| `COMPCAP_")]
    assert len(rows) == len(Settings.model_fields)
    raw = re.compile(r"PosixPath|typing\.|pydantic\.|<class|Literal\[|\| None")
    assert [row for row in rows if raw.search(row)] == []
    assert "| `COMPCAP_REPO` | path | `model_repo` |" in page
    assert "| `COMPCAP_BACKGROUND_SHARE` | float in (0, 1] | 0.25 |" in page
    assert "| `COMPCAP_API_KEYS` | list of secret" in page
    assert "| `COMPCAP_DEVICE` | one of: auto, cpu, cuda | `auto` |" in page


def test_every_setting_is_in_exactly_one_section_of_the_reference() -> None:
    """``SECTIONS`` (the reference page's tables, in order) splits ``Settings``' fields: each field in
    one section, each section titled, and every section class ``Settings`` is made of listed."""
    owners: dict[str, list[str]] = {}
    for section in SECTIONS:
        assert section.title, section
        for name in section.model_fields:
            owners.setdefault(name, []).append(section.__name__)
    assert set(owners) == set(Settings.model_fields)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    titled = {c for c in Settings.__mro__ if issubclass(c, Section) and "title" in vars(c)}
    assert titled == set(SECTIONS)
