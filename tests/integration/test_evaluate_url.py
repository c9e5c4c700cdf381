"""``compcap-lab evaluate --url`` against a real ``compcap serve`` on the tiny repository: the same JSON as
the in-process evaluation (every caption and every score), and a run killed mid-way (SIGKILL) and
restarted from its JSON-lines checkpoint holds every (run, image) exactly once and ends with the same
JSON. METEOR is skipped (a Java start per run, ~12 s each here): it is a function of the same top-1
captions, which are compared one by one (the README's full-split figure was checked with METEOR on)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compcap_lab.cli import main
from compcap_lab.studies.evaluate import _decode_all, evaluate, load_images, runs_for
from export.data.coco_captions import load_folder
from export.data.splits import load_split, split_path_for
from sceneworld.dataset import write_dataset
from service.manifest import load_manifest
from tests.integration.conftest import ROOT, free_port, serving

pytestmark = pytest.mark.integration

LIMIT = 12  # images of the split's test set
BEAM = 5
RERANK_BEAM = 20  # B of the re-ranked runs (100 in the studies; smaller keeps the test quick)
WORLD_SEED = 424242


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval_url") / "world"
    write_dataset(folder, images=400, seed=WORLD_SEED, progress=False)
    assert main(["splits", "--data", str(folder), "--kind", "systematicity", "--group", "1"]) == 0
    return folder


@pytest.fixture(scope="module")
def gateway(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    env = {
        **os.environ,
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_REQUEST_DEADLINE_S": "120",
        "COMPCAP_STATE_URL": "",
    }
    with serving(cmd, env, port, tmp_path_factory.mktemp("gateway") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def in_process(world: Path, tiny_repo: Path) -> dict[str, Any]:
    """The in-process evaluation: the reference both remote runs must equal."""
    return evaluate(
        tiny_repo,
        world,
        None,
        "systematicity",
        1,
        None,
        beam_size=BEAM,
        limit=LIMIT,
        rerank_beam_size=RERANK_BEAM,
        meteor=False,
    )


def _where(world: Path) -> list[str]:
    return ["--data", str(world), "--split", "systematicity", "--group", "1", "--limit", str(LIMIT)]


def _remote_args(world: Path, url: str) -> list[str]:
    return ["evaluate", "--url", url, *_where(world), "--rerank-beam-size", str(RERANK_BEAM), "--no-meteor"]


def _lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a checkpoint (a torn tail left out)."""
    data = path.read_bytes() if path.is_file() else b""
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


def test_remote_evaluation_equals_in_process(
    world: Path, tiny_repo: Path, gateway: str, in_process: dict[str, Any], tmp_path: Path
) -> None:
    json_out, checkpoint = tmp_path / "remote.json", tmp_path / "remote.jsonl"
    args = [*_remote_args(world, gateway), "--json", str(json_out), "--checkpoint", str(checkpoint)]
    assert main(args) == 0
    remote = json.loads(json_out.read_text())
    assert remote == in_process  # every recall, caption metric and diversity figure
    assert remote["images"] == LIMIT and len(remote["results"]) == 4

    # the captions themselves: the checkpoint's against the in-process engine's, image by image
    split = load_split(split_path_for(world, "systematicity", 1))
    dataset = load_folder(world)
    ids = [int(i) for i in split.sets["test"]][:LIMIT]
    manifest = load_manifest(tiny_repo)
    images = load_images(
        Path(dataset.root), [dataset.file_names[i] for i in ids], manifest.image.height, manifest.image.width
    )
    runs = runs_for(manifest)
    decoded = asyncio.run(_decode_all(tiny_repo, images, runs, BEAM, RERANK_BEAM, 0.0))
    got = {(e["captioner"], e["ranker"], e["image_id"]): e["captions"] for e in _lines(checkpoint)}
    assert len(got) == len(runs) * LIMIT
    for (cap, rk), per_image in zip(runs, decoded, strict=True):
        for image_id, captions in zip(ids, per_image, strict=True):
            assert got[cap, rk, image_id] == captions, (cap, rk, image_id)
            assert len(captions) == BEAM


def test_killed_run_resumes_without_duplicate_or_missing_image(
    world: Path, gateway: str, in_process: dict[str, Any], tmp_path: Path
) -> None:
    json_out, checkpoint = tmp_path / "resumed.json", tmp_path / "resumed.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "compcap_lab.cli",
        *_remote_args(world, gateway),
        "--concurrency",
        "2",
        "--checkpoint",
        str(checkpoint),
        "--json",
        str(json_out),
    ]
    total = 4 * LIMIT
    with (tmp_path / "first.log").open("wb") as log:
        first = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while len(_lines(checkpoint)) < 3:  # some lines, far from all: kill now
                assert first.poll() is None, (tmp_path / "first.log").read_text()
                assert time.monotonic() < deadline, "no checkpoint line in 120 s"
                time.sleep(0.005)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(timeout=10)
    done_before = _lines(checkpoint)
    assert 3 <= len(done_before) < total and not json_out.exists()
    with checkpoint.open("ab") as f:  # as if killed in the middle of a write: a torn last line
        f.write(b'{"captioner": "butd", "ranker": null, "image_')

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert "ignored a torn last line" in second.stderr

    lines = _lines(checkpoint)
    assert checkpoint.read_bytes().endswith(b"\n")  # the torn tail was cut, not glued to a line
    assert lines[: len(done_before)] == done_before  # kept as they were, appended after
    keys = [(e["captioner"], e["ranker"], e["image_id"]) for e in lines]
    assert len(keys) == len(set(keys)) == total  # every (run, image) exactly once
    assert {(c, r) for c, r, _ in keys} == {(r["captioner"], r["ranker"]) for r in in_process["results"]}
    assert all(sum(1 for k in keys if k[:2] == run) == LIMIT for run in {k[:2] for k in keys})

    resumed = json.loads(json_out.read_text())
    assert resumed == in_process

    # a third run finds everything done: nothing is sent again, nothing appended
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert _lines(checkpoint) == lines and json.loads(json_out.read_text()) == resumed


def test_a_checkpoint_of_other_options_is_refused(world: Path, gateway: str, tmp_path: Path) -> None:
    checkpoint = tmp_path / "other.jsonl"
    line = {
        "captioner": "butd",
        "ranker": None,
        "image_id": int(load_split(split_path_for(world, "systematicity", 1)).sets["test"][0]),
        "options": {"beam_size": 3, "n_best": 3, "rerank": False, "rerank_weight": 0.0},
        "captions": ["a cat"],
    }
    checkpoint.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="pass another --checkpoint"):
        evaluate(
            None,
            world,
            None,
            "systematicity",
            1,
            None,
            limit=2,
            meteor=False,
            url=gateway,
            checkpoint=checkpoint,
        )
    with pytest.raises(ValueError, match="either a model repository or a gateway url"):
        evaluate(None, world, None, "systematicity", 1, None, limit=2)
