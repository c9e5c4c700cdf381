"""``loadtests.load.cpu``: CPU per caption and the throughput bounds the cores allow; the HTTP floor's body
parsing."""

import os
import subprocess
import sys
import time

import pytest

from loadtests.load.cpu import (
    CpuMeter,
    bounds_of_limit,
    cpu_bound,
    main_thread_cpu_s,
    model_cpu_ms_per_caption,
    process_cpu_s,
    step_cpu_ms_per_row,
)
from loadtests.load.http_load import BOUNDARY, multipart_body
from loadtests.peers.http_floor import first_part

CURVE = [
    {"rows": 10, "ms_per_call": 1.0, "cpu_ms_per_call": 2.0, "rows_per_s": 10_000.0},
    {"rows": 100, "ms_per_call": 4.0, "cpu_ms_per_call": 8.0, "rows_per_s": 25_000.0},
    {"rows": 100, "ms_per_call": 6.0, "cpu_ms_per_call": 6.0, "rows_per_s": 16_000.0},  # 1 thread
    {"rows": 200, "ms_per_call": 5.0, "cpu_ms_per_call": 10.0, "rows_per_s": 40_000.0},
    {"rows": 400, "ms_per_call": 9.0, "rows_per_s": 44_000.0},  # an old result without CPU: ignored
]


def test_cpu_bound_is_cores_over_the_cpu_a_caption_costs() -> None:
    assert cpu_bound(2, [4.0, 1.0]) == pytest.approx(400.0)
    assert cpu_bound(1, [2.5]) == pytest.approx(400.0)
    with pytest.raises(ValueError, match="cores"):
        cpu_bound(0, [1.0])
    with pytest.raises(ValueError, match="cpu_ms_per_caption"):
        cpu_bound(2, [0.0])


def test_step_cpu_per_row_takes_the_least_mode_and_interpolates() -> None:
    assert step_cpu_ms_per_row(CURVE, 100) == pytest.approx(0.06)  # the 1-thread point: 6 ms / 100
    assert step_cpu_ms_per_row(CURVE, 150) == pytest.approx((0.06 + 0.05) / 2)
    assert step_cpu_ms_per_row(CURVE, 1) == pytest.approx(0.2)  # clamped to the smallest size
    assert step_cpu_ms_per_row(CURVE, 10_000) == pytest.approx(0.05)  # the 400-row point has no CPU
    with pytest.raises(ValueError, match="cpu_ms_per_call"):
        step_cpu_ms_per_row([{"rows": 10, "ms_per_call": 1.0}], 10)


def test_bounds_add_the_load_generator_and_the_floor_to_the_models() -> None:
    result = {
        "cpu_count": 2,
        "rows_per_caption": 40.0,
        "step_curve": CURVE,
        "limit": {"ideal_captions_per_s": 1000.0},
        "compute_limit": {"cpu_ms_per_caption_other": {"visual_encoder": 1.0, "cap_init": 0.2}},
        "floor": {"cpu_ms_per_caption": {"server": 1.5, "client": 0.8}},
    }
    # at 200 rows: 40 rows x 0.05 ms = 2 ms of step + 1.2 ms of the other calls = 3.2 ms
    assert model_cpu_ms_per_caption(result, 200) == pytest.approx(3.2)
    row = {"mean_rows_per_call": 200, "cpu_ms_per_caption": {"server": 6.0, "client": 0.8}}
    bounds = bounds_of_limit(result, row)
    assert bounds["model_cpu_ms_per_caption"] == pytest.approx(3.2)
    assert bounds["any_server"] == pytest.approx(2e3 / 4.0 / 1000.0, abs=1e-3)  # 3.2 + 0.8 ms on 2 cores
    assert bounds["http_floor"] == pytest.approx(2e3 / 5.5 / 1000.0, abs=1e-3)  # 3.2 + 1.5 + 0.8 ms
    # the floor's main-thread figure is part of its server's 1.5 ms, not more CPU on top
    result["floor"]["cpu_ms_per_caption"]["server_main_thread"] = 1.4
    assert bounds_of_limit(result, row)["http_floor"] == pytest.approx(bounds["http_floor"])
    del result["floor"]
    assert "http_floor" not in bounds_of_limit(result, row)


def test_the_meter_reads_the_cpu_another_process_burns() -> None:
    burner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass",
        ]
    )
    meter = CpuMeter({"server": burner.pid, "client": os.getpid()})
    meter.start()
    os.waitid(os.P_PID, burner.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: /proc keeps it
    meter.stop()
    burner.wait(timeout=30)
    assert 0.3 < meter.cpu_s["server"] < 1.0
    assert meter.cpu_s["client"] < 0.3  # this process only waited
    assert meter.per_item_ms(2)["server"] == pytest.approx(meter.cpu_s["server"] / 2 * 1e3, abs=1e-3)
    assert meter.per_item_ms(0) == {}
    assert 0.0 < meter.busy_share() <= 1.0
    with pytest.raises(ValueError, match="pids"):
        CpuMeter({})


def test_the_meter_splits_a_process_main_thread_from_its_other_threads() -> None:
    # a process whose second thread burns 0.6 s of CPU while its main thread sleeps
    code = (
        "import threading, time\n"
        "def burn():\n"
        "    t = time.thread_time()\n"
        "    while time.thread_time() - t < 0.6: pass\n"
        "th = threading.Thread(target=burn); th.start(); th.join()\n"
        "t = time.thread_time()\n"
        "while time.thread_time() - t < 0.2: pass\n"  # then the main thread burns 0.2 s
        "time.sleep(30)\n"
    )
    burner = subprocess.Popen([sys.executable, "-c", code])
    try:
        meter = CpuMeter({"server": burner.pid}, main_threads=("server",))
        meter.start()
        deadline = time.monotonic() + 20
        while process_cpu_s(burner.pid) < 0.8 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        meter.stop()
    finally:
        burner.kill()
        burner.wait(timeout=30)
    assert 0.15 < meter.main_thread_cpu_s["server"] < 0.5
    assert meter.cpu_s["server"] > meter.main_thread_cpu_s["server"] + 0.4
    per = meter.per_item_ms(1)
    assert per["server_main_thread"] == pytest.approx(meter.main_thread_cpu_s["server"] * 1e3, abs=1e-3)
    assert 0.0 < meter.main_thread_busy()["server"] < 1.0
    with pytest.raises(ValueError, match="main_threads"):
        CpuMeter({"client": os.getpid()}, main_threads=("server",))


def test_main_thread_cpu_of_this_process_counts_only_this_thread() -> None:
    import threading

    before = main_thread_cpu_s(os.getpid())

    def burn() -> None:
        t = time.thread_time()
        while time.thread_time() - t < 0.3:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    assert main_thread_cpu_s(os.getpid()) - before < 0.15  # the main thread only waited


def test_process_cpu_of_this_process_grows_with_work() -> None:
    before = process_cpu_s(os.getpid())
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    assert process_cpu_s(os.getpid()) - before >= 0.09


def test_the_floor_finds_the_upload_in_a_multipart_body() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3
    assert first_part(multipart_body(png), BOUNDARY.encode()) == png
    assert first_part(b"no multipart here", BOUNDARY.encode()) == b""
