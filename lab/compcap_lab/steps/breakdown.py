"""Where a ``<cap>_step`` call's time goes: copies between host and device against the graph's own run,
``python -m compcap_lab.steps.breakdown [--repo R] [--device cuda] [--rows 16 160 640]``.

Per row count, the median ms of one call of the default captioner's step, three ways, on the memory of
real encoded images (5 rows per image):

- ``host``: ``session.run`` on host arrays, every output back to the host — what the engine did before
  (every step uploaded the image memory and the state and downloaded the log-probs);
- ``served``: as the engine calls it now — the image memory kept on the device (``ResidentInputs``, I/O
  binding), and for a step of contract v3 the decoder state too (the last call's ``state_out`` left on
  the device, gathered by the graph), the other outputs a whole-row step reads copied back;
- ``device``: every input already on the device and every output left there (I/O binding both ways,
  then a synchronisation): the graph's kernels and their launches, no copy.

``copies = host − device`` is what the transfers cost; ``device`` is the call's floor on that device.
On the CPU provider the three are one memory space (copies ≈ 0); on a GPU they show where the time
goes. The GPU check prints it (``lab/compcap_lab/gpu/check.py``)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROWS = (16, 160, 640)


def _median_ms(call: Callable[[], object], seconds: float, warm: int = 3) -> float:
    for _ in range(warm):
        call()
    times: list[float] = []
    stop = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < stop:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def _bound_run(session: Any, binding: Any) -> None:
    session.run_with_iobinding(binding)
    binding.synchronize_outputs()


def breakdown(
    repo: Path, device: str, rows: Sequence[int] = ROWS, seconds: float = 1.0
) -> dict[int, dict[str, float]]:
    """Per row count: ``host_ms``, ``served_ms``, ``device_ms`` and ``copies_ms`` (module docstring)."""
    import onnxruntime as ort

    from loadtests.load.inputs import bench_images
    from service.backends.onnxruntime.backend import OnnxRuntimeBackend
    from service.engine.runner import ModelRunner, StepInput
    from service.manifest import load_manifest

    manifest = load_manifest(repo)
    cap = manifest.captioner(manifest.default_captioner)
    backend = OnnxRuntimeBackend(repo, manifest, device=device)
    try:
        runner = ModelRunner(backend, manifest)
        pool = bench_images(-(-max(rows) // 5), manifest.image.height, manifest.image.width)
        enc = asyncio.run(runner.encode(cap.name, pool))
        session, names = backend.sessions[cap.step], backend.outputs[cap.step]
        where = backend.devices[cap.step]
        width = 1 if cap.reads == "last_token" else min(10, cap.max_length)
        size = runner.vocab_size(cap.name)
        rng = np.random.default_rng(0)
        out: dict[int, dict[str, float]] = {}
        for n in rows:
            index = (np.arange(n) // 5).astype(np.int64)
            tokens = rng.integers(4, size, (n, width)).astype(np.int64)
            memory = np.array(enc.memory[: index[-1] + 1])
            step_rows = StepInput(memory, index, tokens, np.full(n, width), enc.state[index])
            inputs = runner.step_inputs(cap.name, step_rows)
            resident = dict(inputs)
            frozen = np.array(memory)
            frozen.flags.writeable = False  # read-only: the backend keeps it on the device
            resident["memory"] = frozen
            whole = [name for name in names if name not in ("top_logprobs", "top_tokens", "eos_logprob")]
            keep = ("state_out",) if runner.gathers_state(cap.name) else ()
            if keep:  # the state as serving holds it: the last call's state_out, left on the device
                kept = backend._run(cap.step, resident, whole, keep)["state_out"]
                resident["state"] = kept
                resident["state_new"] = np.zeros((0, kept.shape[1]), np.float32)

            binding = session.io_binding()
            for name, array in inputs.items():
                value = np.asarray(array)
                binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, where, 0))
            for name in names:
                binding.bind_output(name, where)

            host = _median_ms(functools.partial(session.run, names, inputs), seconds)
            served = _median_ms(functools.partial(backend._run, cap.step, resident, whole, keep), seconds)
            floor = _median_ms(functools.partial(_bound_run, session, binding), seconds)
            out[n] = {
                "host_ms": host,
                "served_ms": served,
                "device_ms": floor,
                "copies_ms": max(0.0, host - floor),
            }
        return out
    finally:
        asyncio.run(backend.close())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("model_repo"))
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per figure")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = breakdown(args.repo, args.device, args.rows, args.seconds)
    print(f"{'rows':>6} {'host ms':>9} {'served ms':>10} {'device ms':>10} {'copies ms':>10}")
    for n, row in result.items():
        print(
            f"{n:>6} {row['host_ms']:>9.3f} {row['served_ms']:>10.3f} {row['device_ms']:>10.3f} "
            f"{row['copies_ms']:>10.3f}"
        )
    if args.json is not None:
        payload: dict[str, Any] = {"repo": str(args.repo), "device": args.device, "rows": result}
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
