"""A probe kind with a probe-set format of its own is one record and its maths: this module is all of
it (the record, the maths, the format and the test; with its docs page, a new kind's four files). The
format (``word_targets``: target words and the images whose references name them) is written by the
one writer (``export.probesets.write``), listed in a copy of the tiny repository's probe index, read
and checked by ``service.probesets`` through the format's record (its ``check`` and its reader,
``probe_set.targets()``), and the kind runs as a job through the HTTP API on the tiny models; the
record's description (``GET /v1/probe-kinds``: its set format, fields, figures and view) is all the
client needs to read the result (``ProbeKindInfo``, ``ProbeJob.figures``), and all the web page needs to
draw it (``tests/browser/test_new_kind_page.py``). Nothing in ``probes.js``, the client or
``service/probesets/read.py`` names it. Once unregistered, neither the kind nor its format is known."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from compcap_client import ProbeJob, ProbeKindInfo
from export.probesets.repo import register_probe_sets
from export.probesets.write import ProbeContent, write_probe_set
from service.evaluation.intervals import bootstrap_interval
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.probes.kinds import kind_names, register, unregister
from service.probes.kinds.record import KindRun, ProbeKind, decode, invalid
from service.probes.kinds.view import Chart, Figure, KindView, Side
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


def targets(probe_set: ProbeSet) -> dict[str, list[int]]:
    """The reader: each target word's images (``probe_set.targets()``)."""
    probe_set.expect(FORMAT_NAME)
    return {str(t["word"]): [int(i) for i in t["images"]] for t in probe_set.info["targets"]}


WORD_TARGETS = SetFormat(
    FORMAT_NAME,
    check,
    keys="targets: a word and the images whose references name it",
    readers={"targets": targets},
)


# -- the maths -----------------------------------------------------------------------------------------


def hits(targets: Mapping[str, list[int]], top1: Mapping[int, str]) -> dict[str, list[float]]:
    """Per target word with images, each image's 1 (its top-1 caption names the word) or 0."""
    return {word: [float(word in top1[i].split()) for i in ids] for word, ids in targets.items() if ids}


def word_result(targets: Mapping[str, list[int]], top1: Mapping[int, str]) -> dict[str, Any]:
    """The hit rate of each word, with its 95% bootstrap interval over its images beside it."""
    per_word = hits(targets, top1)
    intervals = {word: bootstrap_interval([units]) for word, units in per_word.items()}
    return {
        "images": len(top1),
        "hit_rate": {word: sum(units) / len(units) for word, units in per_word.items()},
        "hit_rate_interval": {w: None if iv is None else iv.as_dict() for w, iv in intervals.items()},
    }


# -- the record ----------------------------------------------------------------------------------------


async def run(job: KindRun) -> dict[str, Any]:
    chosen = {word: ids[: job.spec.images] for word, ids in targets(job.probe_set).items()}
    ids = sorted({i for v in chosen.values() for i in v})
    job.progress.total = len(ids)
    generated = await decode(job.engine, job.probe_set, ids, job.spec.params, job.progress)
    return word_result(chosen, {i: caps[0] if caps else "" for i, caps in generated.items()})


def check_request(probe_set: ProbeSet, pairs: tuple[str, ...] | None) -> None:
    if not probe_set.info["targets"]:
        raise invalid(f"probe set {probe_set.name!r} has no targets", "probe_set")


VIEW = KindView(
    images="Images per word",
    chart=Chart(
        layout="bars",
        figure="word hit rate",
        about="word hit rate: the share of a target word's images whose top-1 caption names it; each bar "
        "with its 95% interval.",
        title="per target word",
        sides=(Side("hit_rate", "all", "target word", "target words named by the top-1 caption", "words"),),
        value="hit_rate",
    ),
)
FIELDS = {
    "images": "images decoded",
    "hit_rate": "target word -> the share of its images whose top-1 caption names it",
}

KIND = ProbeKind(
    name=NAME,
    description="test only: share of a target word's images whose top-1 caption names it",
    run=run,
    set_format=WORD_TARGETS,
    check=check_request,
    summary=lambda r: f"{len(r['hit_rate'])} words over {r['images']} images",
    fields=FIELDS,
    figures=(Figure("hit_rate.*", "{} hit rate"),),
    view=VIEW,
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


def add_word_set(out: Path) -> None:
    """Write a ``word_targets`` set of ``out``'s productivity set's images into repository ``out``
    (the kind registered) and list it in its probe index."""
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


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory, registered: ProbeKind) -> Path:
    """A copy of the tiny repository with a ``word_targets`` set of its productivity set's images."""
    out = tmp_path_factory.mktemp("new_kind") / "model_repo"
    shutil.copytree(tiny_repo, out, symlinks=True)
    add_word_set(out)
    return out


def test_the_set_is_written_read_and_checked_by_its_format(repo: Path) -> None:
    loaded = load_probe_set(repo / "probes" / SET_NAME)
    assert loaded.kind == FORMAT_NAME and loaded.format is WORD_TARGETS
    assert [t["word"] for t in loaded.info["targets"]]
    # the reader is the format's: offered by a set of it, refused by a set of another format
    assert loaded.targets() == targets(loaded) and all(loaded.targets().values())
    with pytest.raises(ProbeSetError, match=f"is {FORMAT_NAME}, not productivity"):
        loaded.buckets("density")
    productivity = repo_probe_sets(repo, load_manifest(repo))["productivity"]
    with pytest.raises(ProbeSetError, match=f"is productivity, not {FORMAT_NAME}"):
        productivity.targets()
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
        # the record's description: what the client and the web page read of the kind
        described = kinds[NAME]
        assert described["set_format"] == {
            "name": FORMAT_NAME,
            "keys": WORD_TARGETS.keys,
            "scene_graphs": False,
            "readers": ["targets"],
        }
        assert described["fields"] == FIELDS and described["gauges"] == []
        assert described["figures"] == [
            {"path": "hit_rate.*", "label": "{} hit rate", "interval": "hit_rate_interval.*"}
        ]
        assert described["view"]["chart"]["figure"] == "word hit rate" and described["view"]["shares"] is None
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
        assert set(job["result"]) == {*FIELDS, "hit_rate_interval"}  # its fields, each figure's interval
        check_client_reads(job, described)
        wrong = client.post("/v1/probes", json={"kind": "productivity", "probe_set": SET_NAME})
        assert wrong.status_code == 422 and wrong.json()["error"]["details"][0]["field"] == "probe_set"


def check_client_reads(job: Mapping[str, Any], described: Mapping[str, Any]) -> None:
    """The client reads the job's result from the kind's description alone (``ProbeKindInfo``): its
    figures under the record's labels with their intervals; and offline, without the description, the
    same figures by the results' convention (``X_interval`` beside ``X``)."""
    kind = ProbeKindInfo.from_json(described)
    assert (kind.name, kind.probe_sets, kind.fields) == (NAME, FORMAT_NAME, FIELDS)
    assert kind.set_format is not None and kind.set_format.readers == ["targets"]
    assert kind.view["chart"]["layout"] == "bars"
    parsed = ProbeJob.from_json(job)
    rates = job["result"]["hit_rate"]
    figures = parsed.figures(kind)
    assert set(figures) == {f"{word} hit rate" for word in rates}
    for word, rate in rates.items():
        figure = figures[f"{word} hit rate"]
        assert figure.path == ("hit_rate", word) and figure.value == pytest.approx(rate)
        assert figure.interval is not None and figure.interval.low <= rate <= figure.interval.high
        assert figure.interval == parsed.interval("hit_rate", word)
    offline = parsed.figures()
    assert {label: f.value for label, f in offline.items()} == {f"hit_rate.{w}": r for w, r in rates.items()}
    assert ProbeJob.from_json({"id": "p", "kind": NAME, "status": "running"}).figures(kind) == {}


def test_a_format_without_its_kind_is_refused(repo: Path) -> None:
    other = SetFormat(FORMAT_NAME)
    with pytest.raises(ValueError, match="registered already"):
        register(ProbeKind(name="another", description="", run=run, set_format=other))
    assert "another" not in kind_names()
