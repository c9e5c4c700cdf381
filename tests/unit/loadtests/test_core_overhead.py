"""``compcap_lab.steps.core_overhead`` on the tiny repository with the null backend: the same captions
are asked in process and of a real engine core in another process, and both are measured (no timing is
compared: the machine's speed is not tested)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np

from compcap_lab.steps.core_overhead import in_process, process_cpu_s, through_a_core
from service.manifest import load_manifest
from service.settings import load_settings


def test_both_setups_caption_every_image_and_count_both_processes(tiny_repo: Path) -> None:
    settings = load_settings(repo=tiny_repo, backend="null", intra_op_threads=1)
    manifest = load_manifest(tiny_repo)
    images = np.zeros((3, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)
    args = argparse.Namespace(clients=[1, 3], captions=12, core_cpus=None)
    here = asyncio.run(in_process(settings, images, args))
    there = asyncio.run(through_a_core(settings, images, args))
    for rows, processes in ((here, 1), (there, 2)):
        assert [r["clients"] for r in rows] == [1, 3]
        for row in rows:
            assert row["captions"] == 12 and row["p90_ms"] >= row["p50_ms"] > 0
            assert len(row["cpu_ms_per_caption_by_process"]) == processes
            assert all(ms >= 0 for ms in row["cpu_ms_per_caption_by_process"])


def test_the_cpu_of_a_process_grows_as_it_works() -> None:
    import os

    before = process_cpu_s(os.getpid())
    sum(i * i for i in range(3_000_000))
    assert process_cpu_s(os.getpid()) > before
