"""The profile's breakdown puts each sampled stack where its leaf-most marked frame says: numpy under
the beam batch is beam bookkeeping, PIL under the image decoder is image decoding, a stack that only
passes through the server's start-up frames is the event loop, and idle executor threads are kept
out of the shares."""

from __future__ import annotations

import pytest

from loadtests.bench.profile import EVENT_LOOP, breakdown, categorise

ROOT = (
    "MainThread;main (service/cli/__init__.py:10);serve (service/gateway/server.py:16);"
    "run (uvicorn/server.py:67)"
)


def test_leaf_most_marker_wins() -> None:
    numpy_under_beam = [
        *ROOT.split(";")[1:],
        "advance (service/engine/beam_batch.py:300)",
        "argsort (numpy/x.py:1)",
    ]
    assert categorise(numpy_under_beam) == "beam bookkeeping"
    pil = [
        "captions (service/gateway/routes.py:80)",
        "decode_images (service/images/decode.py:40)",
        "open (PIL/Image.py:1)",
    ]
    assert categorise(pil) == "image decoding"
    assert categorise([*ROOT.split(";")[1:], "run (asyncio/runners.py:118)"]) == EVENT_LOOP
    assert categorise(["_bootstrap (threading.py:1)", "_worker (concurrent/futures/thread.py:81)"]) == (
        "idle executor threads"
    )
    ort = ["_worker (concurrent/futures/thread.py:81)", "_run (service/backends/onnxruntime/backend.py:99)"]
    assert categorise(ort) == "model calls"


def test_breakdown_shares_and_event_loop_idle() -> None:
    collapsed = "\n".join(
        [
            f"thread (1): {ROOT};_run (service/engine/scheduler.py:200) 30",
            f"thread (1): {ROOT};run (asyncio/runners.py:118) 10",
            "thread (2): ort_0;_worker (concurrent/futures/thread.py:81);"
            "_run (service/backends/onnxruntime/backend.py:99) 60",
            "thread (3): asyncio_0;_worker (concurrent/futures/thread.py:81) 500",
        ]
    )
    b = breakdown(collapsed, seconds=1.0, rate_hz=100)
    assert b["samples"] == 100 and b["idle_executor_samples"] == 500
    assert b["share"] == {"model calls": 0.6, "scheduling": 0.3, EVENT_LOOP: 0.1}
    assert b["event_loop_busy"] == pytest.approx(0.4) and b["event_loop_idle"] == pytest.approx(0.6)
    assert set(b["per_thread"]) == {"MainThread", "ort", "asyncio"}
