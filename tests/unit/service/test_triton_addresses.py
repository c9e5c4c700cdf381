"""The pure parts of the Triton backend's address pool (``service.backends.triton.addresses``): the URL
forms, picking, ejection and back-off on a fake clock, the model identity check; the pool's ``call``
(one retry on another address, ejection, panic routing) with fake attempts; and the settings."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from service.backends.base import BackendError
from service.backends.triton.addresses import (
    DIGEST_PARAMETER,
    Address,
    AddressSet,
    ModelIdentity,
    State,
    backoff_s,
    expected_identity,
    file_sha256,
    identity_problems,
    is_address_failure,
    latest_version,
)
from service.backends.triton.url import Target, parse_target
from service.manifest import ModelEntry, TensorSpec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- COMPCAP_TRITON_URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("127.0.0.1:8001", Target("single", addresses=("127.0.0.1:8001",))),
        (" triton:8001 ", Target("single", addresses=("triton:8001",))),
        ("a:8001, b:8002", Target("list", addresses=("a:8001", "b:8002"))),
        ("[::1]:8001,10.0.0.2:8001", Target("list", addresses=("[::1]:8001", "10.0.0.2:8001"))),
        ("dns:///compcap-triton:8001", Target("dns", host="compcap-triton", port=8001)),
        ("dns:compcap-triton.compcap.svc:8001", Target("dns", host="compcap-triton.compcap.svc", port=8001)),
        ("dns:///[fd00::1]:8001", Target("dns", host="fd00::1", port=8001)),
    ],
)
def test_the_url_forms(url: str, target: Target) -> None:
    assert parse_target(url) == target


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "empty"),
        ("triton", "no port"),
        ("triton:http", "port must be a number"),
        ("triton:0", "port must be a number"),
        ("triton:70000", "port must be a number"),
        ("a:1,,b:2", "empty address"),
        ("a:1,a:1", "repeats"),
        ("::1:8001", "brackets"),
        ("[::1]8001", r"not \[IPv6\]:port"),
        ("http://triton:8001", "no scheme"),
        ("dns://8.8.8.8/triton:8001", "DNS server"),
        ("dns:///triton", "no port"),
    ],
)
def test_bad_urls_name_the_setting_and_the_forms(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as refused:
        parse_target(url)
    assert "COMPCAP_TRITON_URL" in str(refused.value) and "dns:///name:port" in str(refused.value)


def test_str_of_a_target_is_its_url() -> None:
    for url in ("a:1", "a:1,b:2", "dns:///name:8001", "dns:///[fd00::1]:8001"):
        assert str(parse_target(url)) == url


def test_which_failures_say_the_address_went_away() -> None:
    for status in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
        assert is_address_failure(f"StatusCode.{status}")
    for status in ("INVALID_ARGUMENT", "NOT_FOUND", "INTERNAL", "RESOURCE_EXHAUSTED", "None"):
        assert not is_address_failure(f"StatusCode.{status}")


# --- states, picking, back-off ---------------------------------------------------------------------


def healthy_set(*urls: str, clock: Clock | None = None) -> AddressSet:
    addresses = AddressSet(clock or Clock())
    addresses.update(urls)
    for address in addresses:
        addresses.admit(address)
    return addresses


def test_backoff_doubles_up_to_its_bound() -> None:
    assert [backoff_s(n, 1.0, 16.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 16, 16]
    assert backoff_s(0, 0.5, 4.0) == 0.5


def test_update_keeps_known_addresses_and_reports_joins_and_leaves() -> None:
    addresses = healthy_set("a:1", "b:1")
    joined, left = addresses.update(["b:1", "c:1"])
    assert [a.url for a in joined] == ["c:1"] and [a.url for a in left] == ["a:1"]
    b, c = addresses.get("b:1"), addresses.get("c:1")
    assert b is not None and b.state is State.HEALTHY
    assert c is not None and c.state is State.PENDING
    assert addresses.pick() is b  # a new address gets no call before a probe admits it
    assert addresses.due() == [c]


def test_pick_takes_the_least_outstanding_and_alternates_ties() -> None:
    addresses = healthy_set("a:1", "b:1", "c:1")
    picks = [p.url for p in (addresses.pick() for _ in range(6)) if p is not None]
    assert sorted(picks) == ["a:1", "a:1", "b:1", "b:1", "c:1", "c:1"]  # round robin over the tie
    a, b, c = (addresses.get(u) for u in ("a:1", "b:1", "c:1"))
    assert a is not None and b is not None and c is not None
    a.outstanding, b.outstanding, c.outstanding = 3, 1, 2
    assert addresses.pick() is b
    assert addresses.pick(exclude=["b:1"]) is c
    # calls held while picking: the spread stays even
    held = {u: 0 for u in ("a:1", "b:1", "c:1")}
    a.outstanding = b.outstanding = c.outstanding = 0
    for _ in range(30):
        picked = addresses.pick()
        assert picked is not None
        picked.outstanding += 1
        held[picked.url] += 1
    assert set(held.values()) == {10}


def test_a_failed_call_ejects_once_and_probes_escalate_the_backoff() -> None:
    clock = Clock()
    addresses = healthy_set("a:1", "b:1", clock=clock)
    a = addresses.get("a:1")
    assert a is not None
    assert addresses.fail_call(a, "connection reset")
    assert a.state is State.EJECTED and a.retry_at == clock.now + 1.0 and a.reason == "connection reset"
    assert not addresses.fail_call(a, "again")  # concurrent calls failing too: no escalation
    assert a.retry_at == clock.now + 1.0 and a.reason == "connection reset"
    assert all(addresses.pick() is addresses.get("b:1") for _ in range(4))
    assert addresses.due() == [] and addresses.next_due() == clock.now + 1.0
    clock.now += 1.0
    assert addresses.due() == [a]
    addresses.fail_probe(a, "refused")
    assert a.retry_at == clock.now + 2.0
    clock.now += 2.0
    addresses.fail_probe(a, "refused")
    assert a.retry_at == clock.now + 4.0
    addresses.fail_probe(a, "refused", retry_s=0.2)  # start-up polling: no escalation
    assert a.retry_at == pytest.approx(clock.now + 0.2) and a.failures == 3
    addresses.admit(a)
    assert a.state is State.HEALTHY and a.failures == 0 and a.reason == "" and a.admissions == 2
    assert addresses.counts() == {"pending": 0, "healthy": 2, "ejected": 0, "mismatched": 0}


def test_an_address_never_admitted_stays_pending_and_gets_no_call() -> None:
    clock = Clock()
    addresses = AddressSet(clock)
    addresses.update(["a:1"])
    a = addresses.get("a:1")
    assert a is not None and addresses.due() == [a]  # probed at once
    addresses.fail_probe(a, "connection refused")
    assert a.state is State.PENDING and a.reason == "connection refused" and a.retry_at == clock.now + 1.0
    assert addresses.due() == [] and addresses.next_due() == clock.now + 1.0
    assert addresses.pick() is None  # not even when nothing is healthy: its models were never checked
    assert addresses.summary() == "a:1 pending (connection refused)"
    clock.now += 1.0
    assert addresses.due() == [a]


def test_with_no_healthy_address_the_ejected_ones_are_tried_and_a_success_probes_at_once() -> None:
    clock = Clock()
    addresses = healthy_set("a:1", "b:1", clock=clock)
    a, b = addresses.get("a:1"), addresses.get("b:1")
    assert a is not None and b is not None
    addresses.fail_call(a, "gone")
    addresses.mismatch(b, "butr_step: version 2 served, 1 expected")
    assert addresses.pick() is a  # panic routing: never a mismatched or pending address
    assert addresses.pick(exclude=["a:1"]) is None
    assert addresses.succeed_call(a) and a.retry_at == clock.now and addresses.due() == [a]
    assert not addresses.succeed_call(b)
    assert b.retry_at == clock.now + 16.0
    assert "b:1 mismatched (butr_step: version 2 served" in addresses.summary()
    assert addresses.counts() == {"pending": 0, "healthy": 0, "ejected": 1, "mismatched": 1}
    empty = AddressSet()
    assert empty.pick() is None and empty.summary() == "no address"


# --- model identity --------------------------------------------------------------------------------


def entry(max_batch: int = 8) -> ModelEntry:
    return ModelEntry(
        name="m",
        role="visual_encoder",
        inputs=[TensorSpec(name="image", dtype="UINT8", dims=[32, 32, 3])],
        outputs=[TensorSpec(name="regions", dtype="FP32", dims=[4, 16])],
        max_batch_size=max_batch,
        owner="",
    )


def test_expected_identity_from_the_manifest_and_the_repository(tmp_path: Path) -> None:
    bare = expected_identity(entry())
    assert bare == ModelIdentity(
        "1", 8, frozenset({("image", "UINT8", (-1, 32, 32, 3)), ("regions", "FP32", (-1, 4, 16))}), None
    )
    assert ("image", "UINT8", (32, 32, 3)) in expected_identity(entry(max_batch=0)).tensors
    assert expected_identity(entry(), tmp_path).digest is None  # no model file there
    onnx = tmp_path / "m" / "1" / "model.onnx"
    onnx.parent.mkdir(parents=True)
    onnx.write_bytes(b"weights")
    assert (
        expected_identity(entry(), tmp_path).digest
        == file_sha256(onnx)
        == hashlib.sha256(b"weights").hexdigest()
    )


def test_identity_problems_name_what_differs() -> None:
    want = ModelIdentity("1", 8, frozenset({("x", "FP32", (-1, 4))}), "a" * 64)
    assert identity_problems(want, want) == []
    assert identity_problems(want, ModelIdentity("1", 8, want.tensors, None)) == []  # digest not published
    assert identity_problems(ModelIdentity("1", 8, want.tensors, None), want) == []  # not known here
    problems = identity_problems(want, ModelIdentity("2", 4, frozenset({("x", "FP32", (-1, 5))}), "b" * 64))
    assert len(problems) == 4
    assert problems[0] == "version 2 served, 1 expected"
    assert problems[1] == "max_batch_size 4, the manifest says 8"
    assert "('x', 'FP32', (-1, 5))" in problems[2] and "('x', 'FP32', (-1, 4))" in problems[2]
    assert problems[3].startswith(f"{DIGEST_PARAMETER} bbbbbbbbbbbb…") and "aaaaaaaaaaaa…" in problems[3]


def test_the_served_version_is_the_latest() -> None:
    assert latest_version(["1"]) == "1"
    assert latest_version(["2", "10", "9"]) == "10"
    assert latest_version([]) == ""


def test_served_identity_reads_metadata_and_config() -> None:
    pytest.importorskip("tritonclient.grpc")
    from service.backends.triton.pool import served_identity

    tensor = SimpleNamespace(name="x", datatype="FP32", shape=[-1, 4])
    metadata = SimpleNamespace(versions=["1"], inputs=[tensor], outputs=[])
    config = SimpleNamespace(
        max_batch_size=8, parameters={DIGEST_PARAMETER: SimpleNamespace(string_value="c" * 64)}
    )
    assert served_identity(metadata, config) == ModelIdentity(
        "1", 8, frozenset({("x", "FP32", (-1, 4))}), "c" * 64
    )
    assert served_identity(metadata, SimpleNamespace(max_batch_size=8, parameters={})).digest is None


# --- the pool's calls (fake attempts: no server) ---------------------------------------------------


def failing(status: str) -> Exception:
    from tritonclient.utils import InferenceServerException

    return InferenceServerException("boom", status=f"StatusCode.{status}")


def run_calls(outcomes: dict[str, list[str]], healthy: list[str], calls: int = 1) -> tuple[list, AddressSet]:
    """Run ``calls`` pool calls whose attempt on an address fails with the next status listed for it
    ('' = succeeds); returns (results or exceptions, then the addresses tried; the pool's addresses)."""
    pytest.importorskip("tritonclient.grpc")
    from service.backends.triton.pool import TritonPool
    from service.metrics import Metrics

    async def go() -> tuple[list, AddressSet]:
        pool = TritonPool(parse_target(",".join(outcomes)), {}, [], Metrics())
        for address in pool.addresses:
            if address.url in healthy:
                pool.addresses.admit(address)
        seen: list[str] = []

        async def attempt(client: object, address: Address, left_s: float) -> str:
            seen.append(address.url)
            status = outcomes[address.url].pop(0) if outcomes[address.url] else ""
            if status:
                raise failing(status)
            return address.url

        results: list[object] = []
        for _ in range(calls):
            try:
                results.append(await pool.call("m", attempt, 5.0))
            except Exception as exc:
                results.append(exc)
        await pool.close()
        return [*results, seen], pool.addresses

    return asyncio.run(go())


def test_a_call_whose_address_went_away_is_retried_once_elsewhere() -> None:
    results, addresses = run_calls({"a:1": ["UNAVAILABLE"], "b:1": []}, healthy=["a:1", "b:1"], calls=3)
    *served, seen = results
    assert served == ["b:1", "b:1", "b:1"]
    assert seen[0] in ("a:1", "b:1") and "a:1" in seen[:2]
    a = addresses.get("a:1")
    assert a is not None and a.state is State.EJECTED and "UNAVAILABLE" in a.reason


def test_a_bad_request_is_not_retried_and_ejects_nothing() -> None:
    from tritonclient.utils import InferenceServerException

    results, addresses = run_calls({"a:1": ["INVALID_ARGUMENT"]}, healthy=["a:1"])
    assert isinstance(results[0], InferenceServerException) and results[1] == ["a:1"]
    assert [a.state for a in addresses] == [State.HEALTHY]


def test_a_second_failure_is_raised_and_with_none_healthy_the_ejected_are_tried() -> None:
    from tritonclient.utils import InferenceServerException

    results, addresses = run_calls(
        {"a:1": ["UNAVAILABLE", "UNAVAILABLE"], "b:1": ["UNAVAILABLE", "UNAVAILABLE"]},
        healthy=["a:1", "b:1"],
        calls=3,
    )
    first, second, third, seen = results
    assert isinstance(first, InferenceServerException)  # tried on one, then once on the other
    assert sorted(seen[:2]) == sorted(seen[2:4]) == ["a:1", "b:1"]
    # both ejected: panic routing still tries them (both fail again), and the first that answers serves
    assert isinstance(second, InferenceServerException)
    assert third in ("a:1", "b:1") and seen[4] == third
    assert addresses.counts()["ejected"] == 2
    assert addresses.get(third) in addresses.due()


def test_no_address_at_all_is_a_backend_error_unavailable() -> None:
    results, _ = run_calls({"a:1": []}, healthy=[])
    assert isinstance(results[0], BackendError) and results[0].reason == "unavailable"
    assert "a:1 pending" in str(results[0])


# --- settings --------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "manifest.json").write_text(json.dumps({}), encoding="utf-8")
    return tmp_path


def test_settings_take_the_url_forms_and_bound_the_waits(repo: Path) -> None:
    from service.engine.settings import CoreSettings

    settings = CoreSettings(repo=repo, backend="triton", triton_url="dns:///compcap-triton:8001")
    assert (settings.triton_startup_s, settings.triton_resolve_s) == (300.0, 10.0)
    with pytest.raises(ValidationError, match="COMPCAP_TRITON_URL='triton': 'triton' has no port"):
        CoreSettings(repo=repo, backend="triton", triton_url="triton")
    CoreSettings(repo=repo, triton_url="")  # not read by the embedded backend (compcap bench sets it so)
    for name in ("triton_startup_s", "triton_resolve_s"):
        with pytest.raises(ValidationError, match=name):
            CoreSettings.model_validate({"repo": repo, name: 0})


def test_shared_memory_needs_one_address(repo: Path) -> None:
    from service.engine.settings import CoreSettings

    CoreSettings(repo=repo, backend="triton", triton_url="127.0.0.1:8001", triton_shared_memory=True)
    for url in ("127.0.0.1:8001,127.0.0.2:8001", "dns:///triton:8001"):
        with pytest.raises(ValidationError, match="triton_shared_memory: needs one co-located Triton"):
            CoreSettings(repo=repo, backend="triton", triton_url=url, triton_shared_memory=True)


def test_the_backend_refuses_shared_memory_with_the_settings_words(tiny_repo: Path) -> None:
    """``TritonBackend`` built without the settings (benchmarks, tests) says the same as they do."""
    pytest.importorskip("tritonclient")
    from service.backends.triton.backend import TritonBackend
    from service.manifest import load_manifest

    with pytest.raises(ValueError, match="triton_shared_memory: needs one co-located Triton") as caught:
        TritonBackend("127.0.0.1:8001,127.0.0.2:8001", load_manifest(tiny_repo), shared_memory=True)
    assert "COMPCAP_TRITON_URL=host:port" in str(caught.value) and "on this host" in str(caught.value)


def test_the_device_of_a_served_model_is_its_instance_kind() -> None:
    """Triton's served config (KIND_AUTO resolved by the server) says where a model's instances run, as
    model_config.proto numbers the kinds; groups of two kinds are both named."""
    from tritonclient.grpc import model_config_pb2

    from service.backends.triton.pool import instance_device

    def config(*kinds: int) -> object:
        made = model_config_pb2.ModelConfig(name="m")
        for kind in kinds:
            made.instance_group.add(kind=kind, count=1)
        return made

    group = model_config_pb2.ModelInstanceGroup
    assert instance_device(config(group.KIND_GPU)) == "cuda"
    assert instance_device(config(group.KIND_CPU)) == "cpu"
    assert instance_device(config(group.KIND_GPU, group.KIND_CPU)) == "cpu+cuda"
    assert instance_device(config(group.KIND_AUTO)) == "auto"
    assert instance_device(config()) == "auto"
