#!/usr/bin/env python3
"""The GPU check: on a machine with an NVIDIA GPU, one command checks and prints one table
(each row a figure, its target and pass / fail / skipped with the reason) and writes every figure to a
JSON file (``reports/gpu/gpu_check.json``; ``--json PATH``):

1. CPU vs CUDA parity: each model of the repository on recorded inputs, on a CPU and a CUDA backend, at
   each precision it serves (fp32; fp16 where its set passed its gate; int8 is a CPU precision):
   max |CPU − CUDA| / max |CPU|, target <= 1e-5 at fp32.
2. The 183 behaviour pins of the shipped ``model_repo/`` decoded on CUDA: target, all hold.
3. ``compcap bench`` at 1, 32 and 128 clients with ``COMPCAP_DEVICE=cuda`` and ``cpu``: the 1-client p50
   (target: CUDA <= CPU), captions/s, and the ``<cap>_step`` call at 16 / 160 / 640 rows on each device
   (target at 640 rows on CUDA, as served: <= 0.77 ms; with host arrays and with nothing copied beside it).
4. A random-weight ViT-base + GPT-2 of nlpconnect/vit-gpt2-image-captioning's size, imported with
   ``compcap import hf``, gated at fp16, benched at 32 clients against the transformers per-request peer
   (target >= 10x) and at 128 clients against transformers' own ``generate`` at batch 128.

Each stage runs in a child process with a time budget (60 / 90 / 150 s, stage 4 the rest of 480 s: the
whole check is held to 8 minutes, sized for one H100 — not yet timed on one); what a stage could not
measure in its budget is listed as skipped.

Run it on a GPU host (a Linux machine with an NVIDIA driver for CUDA 13, 580 or newer; no CUDA toolkit
needed, the wheels carry CUDA and cuDNN):

    git clone ... && cd compcap
    make install                                   # the project venv (.venv), as for make test
    .venv/bin/pip uninstall -y onnxruntime         # the CPU build: both builds are the module onnxruntime
    .venv/bin/pip install --no-deps --require-hashes -r requirements-serve-gpu.lock  # its CUDA 13 build
    make gpu-check                                 # or: .venv/bin/python scripts/gpu_check.py [--json PATH]

``nvidia-smi`` must list the GPU. On a machine where CUDA cannot be used (no GPU build of onnxruntime, its
CUDA libraries missing, no device) the check prints one line saying why and exits 0.

``--emulate-on-cpu --repo REPO``: every stage with onnxruntime's CPU provider standing in for CUDA (both
sides ``device="cpu"``), tiny durations and a tiny snapshot (``--no-real-size``): it proves the check
runs end to end (``tests/integration/test_gpu_check.py``) and measures nothing about a GPU.

Other options: ``--stages parity pins bench real``, ``--budget-s``, ``--pin-cases N``, ``--seconds`` per
load level, ``--strict`` (exit 1 when a check fails; by default the table is the result and the exit 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compcap_lab.gpu.check import main

if __name__ == "__main__":
    raise SystemExit(main())
