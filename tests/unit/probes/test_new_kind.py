"""A probe kind with a probe-set format of its own is one record and its maths: this module is all of
it (the record, the maths, the format and the test). The format (``word_targets``: target words and
the images whose references name them) is written by the one writer (``export.probesets.write``),
listed in a copy of the tiny repository's probe index, read and checked by ``service.probesets``
through the format's record, and the kind runs as a job through the HTTP API on the tiny models. Once
unregistered, neither the kind nor its format is known."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from export.probesets.repo import register_probe_sets
from export.probesets.write import ProbeContent, write_probe_set
from service.engine.client import EngineClient
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.probes.kinds import kind_names, register, unregister
from service.probes.kinds.record import ProbeKind, ProbeSpec, Progress, decode, invalid
from service.probes.scoring.parser import PairParser
from service.probesets import (
    ProbeSet,
    ProbeSetError,
    SetFormat,
    format_names,
    load_probe_set,
    repo_probe_sets,
)
from service.probesets.format import image_ids, require
from service.settings import Settings

NAME, FORMAT_NAME, SET_NAME = "word_hits", "word_targets", "words"


# -- the format: probe.json's "targets": [{"word": str, "images": [ids]}] ----------------------------


def check(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    for n, target in enumerate(info["targets"]):
        require(target, ("word", "images"), f"{where}: targets[{n}]")
        image_ids(target["images"], f"{where}: targets[{n}].images", known)


WORD_TARGETS = SetFormat(FORMAT_NAME, check, keys="targets: a word and the images whose references name it")


# -- the maths -----------------------------------------------------------------------------------------


def hit_rates(targets: Mapping[str, list[int]], top1: Mapping[int, str]) -> dict[str, float]:
    """Per target word, the share of its images whose top-1 caption names it."""
    return {
        word: sum(word in top1[i].split() for i in ids) / len(ids) for word, ids in targets.items() if ids
    }


# -- the record ----------------------------------------------------------------------------------------


async def run(
    engine: EngineClient, spec: ProbeSpec, probe_set: ProbeSet, parser: PairParser, progress: Progress
) -> dict[str, Any]:
    targets = {
        str(t["word"]): [int(i) for i in t["images"]][: spec.images] for t in probe_set.info["targets"]
    }
    ids = sorted({i for v in targets.values() for i in v})
    progress.total = len(ids)
    generated = await decode(engine, probe_set, ids, spec.params, progress)
    top1 = {i: caps[0] if caps else "" for i, caps in generated.items()}
    return {"images": len(ids), "hit_rate": hit_rates(targets, top1)}


def check_request(probe_set: ProbeSet, pairs: tuple[str, ...] | None) -> None:
    if not probe_set.info["targets"]:
        raise invalid(f"probe set {probe_set.name!r} has no targets", "probe_set")


KIND = ProbeKind(
    name=NAME,
    description="test only: share of a target word's images whose top-1 caption names it",
    run=run,
    set_format=WORD_TARGETS,
    check=check_request,
    summary=lambda r: f"{len(r['hit_rate'])} words over {r['images']} images",
)


# -- the test ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registered() -> Iterator[ProbeKind]:
    assert FORMAT_NAME not in format_names()
    register(KIND)
    try:
        yield KIND
    finally:
        unregister(NAME)
    assert NAME not in kind_names() and FORMAT_NAME not in format_names()


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory, registered: ProbeKind) -> Path:
    """A copy of the tiny repository with a ``word_targets`` set of its productivity set's images."""
    out = tmp_path_factory.mktemp("new_kind") / "model_repo"
    shutil.copytree(tiny_repo, out, symlinks=True)
    source = repo_probe_sets(out, load_manifest(out))["productivity"]
    ids = list(source.image_ids[:6])
    words = sorted({w for i in ids for ref in source.captions[i] for w in ref.split()})[:2]
    targets = [{"word": w, "images": [i for i in ids if any(w in r.split() for r in source.captions[i])]}
               for w in words]  # fmt: skip

    def save(image_id: int, folder: Path) -> tuple[str, int, int]:
        name = source.file_names[image_id]
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.root / name, folder / name)
        return name, 0, 0

    content = ProbeContent(
        name=SET_NAME,
        kind=FORMAT_NAME,
        source="test",
        world_seed=None,
        captions={i: source.captions[i] for i in ids},
        extra={"targets": targets},
    )
    entry = write_probe_set(out / "probes" / SET_NAME, content, save, repo=out)
    register_probe_sets(out, [entry])
    return out


def test_the_set_is_written_read_and_checked_by_its_format(repo: Path) -> None:
    loaded = load_probe_set(repo / "probes" / SET_NAME)
    assert loaded.kind == FORMAT_NAME and loaded.format is WORD_TARGETS
    assert [t["word"] for t in loaded.info["targets"]]
    probe_json = repo / "probes" / SET_NAME / "probe.json"
    text = probe_json.read_text(encoding="utf-8")
    try:
        probe_json.write_text(text.replace('"images": [', '"images": [999999, ', 1), encoding="utf-8")
        with pytest.raises(ProbeSetError, match=r"targets\[0\]\.images: image ids not in captions.json"):
            load_probe_set(repo / "probes" / SET_NAME)
    finally:
        probe_json.write_text(text, encoding="utf-8")


def test_the_kind_runs_through_the_api(repo: Path) -> None:
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1))) as client:
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        kinds = {k["name"]: k for k in client.get("/v1/probe-kinds").json()["kinds"]}
        assert kinds[NAME]["probe_sets"] == FORMAT_NAME
        sets = {s["name"]: s for s in client.get("/v1/probe-sets").json()["probe_sets"]}
        assert sets[SET_NAME]["kind"] == FORMAT_NAME
        started = client.post("/v1/probes", json={"kind": NAME, "images": 3, "beam_size": 2})
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + 120
        while (job := client.get(f"/v1/probes/{started.json()['id']}").json())["status"] in (
            "queued",
            "running",
        ):
            assert time.monotonic() < deadline, job
            time.sleep(0.1)
        assert job["status"] == "succeeded", job
        rates = job["result"]["hit_rate"]
        assert rates and all(0.0 <= v <= 1.0 for v in rates.values())
        assert job["summary"] == f"{len(rates)} words over {job['result']['images']} images"
        wrong = client.post("/v1/probes", json={"kind": "productivity", "probe_set": SET_NAME})
        assert wrong.status_code == 422 and wrong.json()["error"]["details"][0]["field"] == "probe_set"


def test_a_format_without_its_kind_is_refused(repo: Path) -> None:
    other = SetFormat(FORMAT_NAME)
    with pytest.raises(ValueError, match="registered already"):
        register(ProbeKind(name="another", description="", run=run, set_format=other))
    assert "another" not in kind_names()
