"""``scripts/gpu_check.py``: where CUDA cannot be used it prints one line and exits 0; with
``--emulate-on-cpu`` (the CPU provider standing in for CUDA on both sides) it runs every stage end to end
on the tiny repository — parity of every model, the pins, the step call and ``compcap bench`` on both
"devices", a tiny snapshot imported, gated at fp16 and benched against transformers — and writes every
figure, or the reason it skipped one, to its JSON. Figures are not checked (an emulation measures
nothing about a GPU); the bookkeeping is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.manifest import load_manifest
from tests.integration.conftest import ROOT
from tests.integration.test_device_fallback import unloadable_cuda  # noqa: F401 - a fixture

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "scripts" / "gpu_check.py"
STATUSES = {"pass", "fail", "skipped", "info"}


def no_gpu_line(env: dict[str, str], tmp_path: Path) -> str:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert not out.exists()  # nothing was checked
    return lines[0]


def test_without_a_usable_gpu_it_says_why_in_one_line(tmp_path: Path) -> None:
    # no device visible to CUDA: the same answer on a machine that has one
    line = no_gpu_line({**os.environ, "CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert line.startswith("gpu-check: no usable GPU here, nothing checked: ")
    assert "CUDAExecutionProvider" in line or "CUDA" in line


def test_with_the_cuda_build_whose_libraries_cannot_load(
    unloadable_cuda: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    line = no_gpu_line({**os.environ, "PYTHONPATH": str(unloadable_cuda)}, tmp_path)
    assert line.startswith("gpu-check: no usable GPU here, nothing checked: ")
    assert "cannot load" in line


@pytest.fixture(scope="module")
def emulated(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("gpu_check") / "gpu_check.json"
    cmd = [
        sys.executable, str(SCRIPT), "--emulate-on-cpu", "--repo", str(tiny_repo), "--json", str(out),
        "--seconds", "0.3",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout, json.loads(out.read_text(encoding="utf-8"))


def rows_of(report: dict[str, Any], stage: str) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in report["rows"] if r["stage"] == stage}


def test_the_emulation_says_so_and_every_stage_ran(emulated: tuple[str, dict[str, Any]]) -> None:
    stdout, report = emulated
    assert "EMULATION" in stdout and "measure nothing about a GPU" in stdout
    assert report["emulation"] is True and report["real_size"] is False
    rows = report["rows"]
    failed = [f"{r['stage']} {r['check']}: {r['note']}" for r in rows if r["check"] in ("error", "stage")]
    assert {name: s["status"] for name, s in report["stages"].items()} == dict.fromkeys(
        ("parity", "pins", "bench", "real"), "done"
    ), failed  # a stage that failed says why in its row's note
    for stage in (
        "1 CPU vs CUDA parity",
        "2 behaviour pins",
        "3 bench, shipped models",
        "4 real-size import",
    ):
        assert stage in stdout
    for row in report["rows"]:
        assert row["status"] in STATUSES and row["check"] != "error", row
        assert row["figure"], row
        if row["status"] == "skipped":
            assert row["note"], row  # a skip says why


def test_parity_of_every_model(emulated: tuple[str, dict[str, Any]], tiny_repo: Path) -> None:
    rows = rows_of(emulated[1], "parity")
    for model in load_manifest(tiny_repo).models:
        row = rows[f"fp32 {model.name}"]
        # the same provider on both sides: identical outputs on the recorded inputs
        assert row["values"]["relative_max_diff"] == 0.0 and row["status"] == "pass", row
        assert row["values"]["calls"] >= 1
    assert rows["fp32: models on cpu-as-cuda"]["status"] == "pass"
    assert rows["fp16"]["status"] == "skipped" and "no fp16 variants" in rows["fp16"]["note"]


def test_the_pins(emulated: tuple[str, dict[str, Any]]) -> None:
    (row,) = rows_of(emulated[1], "pins").values()
    assert row["status"] == "pass" and row["values"]["held"] == row["values"]["pinned"] >= 180


def test_the_step_call_and_the_bench_on_both_sides(emulated: tuple[str, dict[str, Any]]) -> None:
    rows = rows_of(emulated[1], "bench")
    for n in (16, 160, 640):
        values = rows[f"step call, {n} rows"]["values"]
        assert values["cpu-as-cuda"] == values["served_ms"] > 0 and values["cpu"] > 0
        assert values["host_ms"] > 0 and values["device_ms"] > 0  # the breakdown of its copies
    assert rows["step call, 640 rows"]["target"] == "cpu-as-cuda <= 0.77 ms"
    for side in ("cpu-as-cuda", "cpu"):
        result = rows[f"compcap bench on {side}"]["values"]["result"]
        assert result["device"] == "cpu"
        assert [r["clients"] for r in result["load"]] == [1, 32, 128]
        assert all(r["sent"] == r["received"] > 0 and r["errors_5xx"] == 0 for r in result["load"])
    assert rows["1-client p50"]["status"] in ("pass", "fail")
    null = rows["null backend: 2 API processes against 1"]  # the emulation's profile: 2 processes
    assert null["status"] in ("pass", "fail") and null["target"] == ">= 1.3×"
    assert null["values"]["pair"]["rounds"] == 2 and null["values"]["pair"]["ratio"]["median"] > 0
    assert all(
        r["sent"] == r["received"] > 0 and r["errors_5xx"] == 0 for r in null["values"]["result"]["load"]
    )


def test_the_imported_captioner(emulated: tuple[str, dict[str, Any]]) -> None:
    rows = rows_of(emulated[1], "real")
    assert rows["snapshot"]["values"]["real_size"] is False
    assert rows["fp16 gate of the import"]["values"]["served"] == "fp16"
    peer = rows["32 clients vs transformers per request"]
    assert peer["status"] in ("pass", "fail") and peer["values"]["multiple"] > 0
    result = peer["values"]["result"]
    assert result["precision"] == "fp16" and result["model"] == "vitgpt2"
    assert [r["clients"] for r in result["baseline"]["load"]] == [32]  # the peer at 32 only
    batched = rows["128 clients vs generate at batch 128"]
    assert batched["values"]["generate"] > 0 and batched["values"]["compcap"] > 0
