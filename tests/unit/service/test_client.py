"""``compcap_client``: the pure parts (Retry-After, the retry policy, error bodies, probe tables) as
unit tests; everything else against a real ``compcap serve`` on the tiny repository, started with a
one-request queue (so that concurrent requests meet real 503s with ``Retry-After``) and an API key."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from compcap_client import (
    NO_RETRY,
    AsyncCompCapClient,
    CompCapClient,
    CompCapError,
    CompCapTransportError,
    ProbeJob,
    RetryPolicy,
    error_from_response,
    parse_retry_after,
)
from service.cli import main
from service.cli.commands import probe_summary
from tests.integration.conftest import free_port, serving

KEY = "unit-test-key-1"


def png(seed: int, size: int = 96) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


# -- pure parts -------------------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 120 ") == 120.0
    assert parse_retry_after("0.5") == 0.5  # lenient: a decimal
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after("Fri, 02 Jan 2026 03:04:15 GMT", now) == 10.0
    assert parse_retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now) == 0.0  # past
    for bad in (None, "", "-1", "soon", "nan", "inf", "Fri, 99 Foo 2026"):
        assert parse_retry_after(bad, now) is None, bad


def test_retry_policy_bounds_attempts_and_total_wait() -> None:
    policy = RetryPolicy(max_attempts=4, max_wait_s=10.0, backoff_s=0.5, max_backoff_s=1.5)
    assert [policy.delay(n, 0.0, None) for n in (1, 2, 3)] == [0.5, 1.0, 1.5]  # back-off, capped
    assert policy.delay(4, 0.0, None) is None  # the 4th attempt was the last
    assert policy.delay(1, 0.0, 7.0) == 7.0  # Retry-After wins over the back-off
    assert policy.delay(2, 7.0, 3.0) == 3.0 and policy.delay(2, 7.5, 3.0) is None  # 10 s in all
    assert RetryPolicy().delay(1, 0.0, 3600.0) is None  # never cut short: give up instead
    assert NO_RETRY.delay(1, 0.0, 0.0) is None
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_errors_come_from_the_gateway_error_body() -> None:
    body = {
        "error": {
            "code": "validation_error",
            "message": "beam_size: too large",
            "details": [{"field": "beam_size", "message": "too large"}],
        }
    }
    err = error_from_response(httpx.Response(422, json=body))
    assert (err.status, err.code, err.message, err.retry_after) == (
        422,
        "validation_error",
        "beam_size: too large",
        None,
    )
    assert err.details == [{"field": "beam_size", "message": "too large"}]
    busy = error_from_response(
        httpx.Response(
            503, json={"error": {"code": "overloaded", "message": "full"}}, headers={"Retry-After": "2"}
        )
    )
    assert (busy.status, busy.code, busy.retry_after) == (503, "overloaded", 2.0)
    proxy = error_from_response(httpx.Response(502, text="<html>bad gateway</html>"))
    assert (proxy.code, proxy.message) == ("http_502", "<html>bad gateway</html>")
    assert str(err) == "422 validation_error: beam_size: too large"


def test_429_and_503_are_retried_after_retry_after_on_both_clients() -> None:
    """The retry loop over a transport stub: two 429/503 answers, then the gateway's answer."""
    answers: list[tuple[int, str, str]] = [  # (status, error code, Retry-After); a new response per request
        (429, "too_many_probes", "0.2"),
        (503, "overloaded", "0"),
        (200, "", ""),
    ]

    def handler(i: list[int]) -> httpx.Response:
        status, code, wait = answers[i[0]]
        i[0] += 1
        if status == 200:
            return httpx.Response(status, json={"jobs": []})
        return httpx.Response(
            status, json={"error": {"code": code, "message": "busy"}}, headers={"Retry-After": wait}
        )

    sync_count = [0]
    start = time.monotonic()
    with CompCapClient(transport=httpx.MockTransport(lambda _: handler(sync_count))) as client:
        assert client.probes() == []
        assert client.retries == 2 and sync_count == [3]
    assert time.monotonic() - start >= 0.2  # the 0.2 s asked for was waited

    async def run() -> int:
        count = [0]
        async with AsyncCompCapClient(transport=httpx.MockTransport(lambda _: handler(count))) as client:
            assert await client.probes() == []
            return client.retries

    assert asyncio.run(run()) == 2

    def long_wait(_: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            json={"error": {"code": "too_many_probes", "message": "busy"}},
            headers={"Retry-After": "3600"},
        )

    with (
        CompCapClient(transport=httpx.MockTransport(long_wait)) as client,
        pytest.raises(CompCapError) as failed,
    ):
        client.probes()  # an hour is past the policy's 60 s: raised at once, not slept
    assert (failed.value.status, failed.value.code, failed.value.retry_after, client.retries) == (
        429,
        "too_many_probes",
        3600.0,
        0,
    )


def test_a_refused_connection_is_retried_then_raised() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    policy = RetryPolicy(max_attempts=3, backoff_s=0.01)
    with (
        CompCapClient(url, retry=policy, trust_env=False) as client,
        pytest.raises(CompCapTransportError) as failed,
    ):
        client.models()
    assert (failed.value.status, failed.value.code, client.retries) == (0, "connect_error", 2)
    with pytest.raises(ValueError, match="http://"):
        CompCapClient("127.0.0.1:8080")


def test_probe_tables_print_every_kind_and_dash_for_what_is_missing() -> None:
    recall = {"1": 0.25, "2": 0.5, "3": 0.5, "4": 0.75, "5": 1.0}
    systematicity = {
        "id": "p1",
        "kind": "systematicity",
        "status": "succeeded",
        "params": {"model": "butr", "rerank": "butr"},
        "probe_set": "systematicity",
        "started_at": 10.0,
        "finished_at": 12.5,
        "result": {
            "ks": [1, 2, 3, 4, 5],
            "pairs": [
                {"pair": "black cat", "group": 1, "category": "color", "held_out": True, "images": 4,
                 "recall": recall, "recall_interval": {"5": {"estimate": 1.0, "low": 0.5, "high": 1.0}},
                 "no_comb_images": 3, "false_composition": {"1": 0.0, "5": 1 / 3}},
                {"pair": "red bus", "group": 1},  # nothing else: every other cell is "-"
            ],
            "held_out": {"pairs": 1, "recall": recall, "per_category": {"color": recall}},
            "false_composition": {"1": 0.0},
        },
    }  # fmt: skip
    text = probe_summary(systematicity)
    assert text.splitlines()[0] == "probe p1: systematicity of butr+butr on systematicity: succeeded in 2.5 s"
    black = next(line for line in text.splitlines() if line.startswith("black cat"))
    assert black.split() == [
        "black",
        "cat",
        "1",
        "color",
        "yes",
        "4",
        "0.250",
        "0.500",
        "0.500",
        "0.750",
        "1.000",
        "[0.500,",  # R@5's 95% interval
        "1.000]",
        "3",
        "0.000",
        "0.333",
    ]
    red = next(line for line in text.splitlines() if line.startswith("red bus"))
    assert red.split()[2:] == ["1", *["-"] * 12]
    assert "FC@1 0.000  FC@5 -" in text and "  color" in text
    assert "%" not in text and "recall" in text  # recall as a fraction, as the API and the page report it
    seen = next(line for line in text.splitlines() if line.startswith("seen"))
    assert set(seen.split()[1:]) == {"-"}

    productivity = {
        "id": "p2",
        "kind": "productivity",
        "status": "succeeded",
        "result": {
            "by": {
                "density": {
                    "low": {"images": 4, "length": 8.5, "nouns": 2.0, "coverage": 0.5, "cider_d": 0.3},
                    "high": {},
                }
            }
        },
    }
    lines = probe_summary(productivity).splitlines()
    assert lines[1].startswith("by density") and lines[3].split() == [
        "low",
        "4",
        "8.50",
        "-",
        "2.00",
        "50.0",
        "30.0",
    ]
    assert lines[4].split() == ["high", *["-"] * 6]

    substitutivity = {
        "id": "p3",
        "kind": "substitutivity",
        "status": "succeeded",
        "result": {
            "rows": {"O vs GT": {"bleu4": 0.1, "meteor": None, "cider_d": 0.2, "images": 5.0}},
            "images": 9,
            "substituted": 5,
        },
    }
    text = probe_summary(substitutivity)
    assert "O vs GT" in text and "images 9, substituted 5, exact replacement -%" in text
    row = next(line for line in text.splitlines() if line.startswith("O vs GT"))
    assert row.split()[3:] == ["10.0", "-", "20.0", "5"]

    failed = probe_summary(
        {"id": "p4", "kind": "productivity", "status": "failed", "error": "boom", "result": None}
    )
    assert failed.splitlines() == ["probe p4: productivity of - on -: failed", "error: boom"]
    job = ProbeJob.from_json({"id": "p5", "status": "running", "progress": {"done": 3, "total": 9}})
    assert (job.done, job.total, job.finished, job.to_json()["progress"]) == (
        3,
        9,
        False,
        {"done": 3, "total": 9},
    )


# -- against a real gateway ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``compcap serve``: one request decodes and one waits per captioner (a third gets 503), API keys on."""
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    env = {
        **os.environ,
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_MAX_QUEUE": "1",
        "COMPCAP_MAX_ACTIVE_REQUESTS": "1",
        "COMPCAP_API_KEYS": KEY,
        "COMPCAP_STATE_URL": "",
    }
    with serving(cmd, env, port, tmp_path_factory.mktemp("client") / "serve.log") as url:
        yield url


@pytest.mark.integration  # starts compcap serve
def test_caption_models_health_and_metrics(gateway: str) -> None:
    images = [png(1), png(2)]
    with CompCapClient(gateway, trust_env=False) as client:
        assert client.health() and client.ready().ready and client.wait_ready(5).backend == "onnxruntime"
        models = client.models()
        assert models.default_captioner in {c.name for c in models.captioners}
        assert (models.height, models.width) == (96, 96)
        butr = models.captioner("butr")
        assert butr.default_ranker == "butr" and butr.trained_on == "systematicity/1"
        assert {"butr", "vsepp"} <= {r.name for r in models.rankers}
        assert "no_repeat_ngram" in {h["name"] for h in client.hooks()}

        out = client.caption(images, model="butr", beam_size=6, n_best=3, rerank=False, max_length=9)
        assert (out.model, out.ranker, out.beam_size, out.n_best, out.max_length) == ("butr", None, 6, 3, 9)
        assert [r.index for r in out.results] == [0, 1]
        for result in out.results:
            assert len(result.captions) == 3 and result.caption == result.captions[0].text == result.texts[0]
            assert all(len(c.tokens) <= 9 and c.ranker_score is None for c in result.captions)
        assert out.timings_ms.total > 0

        reranked = client.caption(
            images[:1], model="butr", beam_size=6, n_best=2, rerank=True, rerank_weight=0.1
        )
        assert reranked.ranker == "butr" and reranked.rerank_weight == 0.1
        assert all(c.ranker_score is not None for c in reranked.results[0].captions)
        hooked = client.caption(
            images[:1], model="butd", hooks=[{"name": "no_repeat_ngram", "params": {"n": 2}}]
        )
        assert hooked.hooks == ["no_repeat_ngram"]
        assert "compcap_request_latency_seconds" in client.metrics_text()

    async def run() -> list[list[str]]:
        async with AsyncCompCapClient(gateway, trust_env=False) as client:
            assert await client.health() and (await client.ready()).ready
            assert (await client.models()).default_captioner == models.default_captioner
            got = await client.caption(
                images, model="butr", beam_size=6, n_best=3, rerank=False, max_length=9
            )
            return [r.texts for r in got.results]

    assert asyncio.run(run()) == [r.texts for r in out.results]  # the same answer from both clients


@pytest.mark.integration  # starts compcap serve
def test_gateway_errors_raise_with_code_and_details(gateway: str) -> None:
    with CompCapClient(gateway, trust_env=False) as client:
        with pytest.raises(CompCapError) as bad:
            client.caption([b"not an image"])
        assert (bad.value.status, bad.value.code) == (400, "not_an_image")
        with pytest.raises(CompCapError) as unknown:
            client.caption([png(1)], model="nope")
        assert unknown.value.status == 404
        with pytest.raises(CompCapError) as invalid:
            client.caption([png(1)], beam_size=1000)
        assert (invalid.value.status, invalid.value.code) == (422, "validation_error")
        assert invalid.value.details and invalid.value.details[0]["field"] == "beam_size"
        with pytest.raises(ValueError, match="empty"):
            client.caption([])
        with pytest.raises(CompCapTransportError) as late:
            client.caption([png(1)], model="butd", beam_size=100, timeout=0.001)
        assert late.value.code == "timeout"


@pytest.mark.integration  # starts compcap serve
def test_503_with_retry_after_is_retried_until_served(gateway: str) -> None:
    """Six concurrent requests on a one-slot queue: without retries some are refused with 503 and
    ``Retry-After: 1``; with the default policy every one is served, after waiting as asked."""
    images = [png(seed) for seed in range(6)]

    async def burst(retry: RetryPolicy) -> tuple[list[object], int]:
        async with AsyncCompCapClient(gateway, retry=retry, trust_env=False) as client:
            calls = [client.caption([image], model="butd", beam_size=20, rerank=False) for image in images]
            return list(await asyncio.gather(*calls, return_exceptions=True)), client.retries

    outcomes, retries = asyncio.run(burst(NO_RETRY))
    refused = [o for o in outcomes if isinstance(o, CompCapError)]
    assert refused and retries == 0
    assert all((e.status, e.code, e.retry_after) == (503, "overloaded", 1.0) for e in refused)

    start = time.monotonic()
    outcomes, retries = asyncio.run(burst(RetryPolicy(max_attempts=20)))
    assert not [o for o in outcomes if isinstance(o, BaseException)] and retries >= 1
    assert time.monotonic() - start >= 1.0  # Retry-After: 1 was honoured


@pytest.mark.integration  # starts compcap serve
def test_api_key_is_sent_as_a_bearer_token(gateway: str) -> None:
    with CompCapClient(gateway, trust_env=False) as anonymous, pytest.raises(CompCapError) as missing:
        anonymous.probes()
    assert (missing.value.status, missing.value.code) == (401, "unauthorized")
    with (
        CompCapClient(gateway, api_key="wrong-key-123", trust_env=False) as wrong,
        pytest.raises(CompCapError) as bad,
    ):
        wrong.probes()
    assert bad.value.status == 403
    with CompCapClient(gateway, api_key=KEY, trust_env=False) as client:
        assert isinstance(client.probes(), list)
        assert client.caption([png(3)], beam_size=2).model  # captions stay open; the header does no harm


@pytest.mark.integration  # starts compcap serve
def test_probe_endpoints_answer_typed_errors(gateway: str, capsys: pytest.CaptureFixture[str]) -> None:
    with CompCapClient(gateway, api_key=KEY, trust_env=False) as client:
        with pytest.raises(CompCapError) as unknown:
            client.probe("no-such-job")
        assert (unknown.value.status, unknown.value.code) == (404, "unknown_job")
        with pytest.raises(CompCapError) as no_set:
            client.start_probe("systematicity", probe_set="no-such-set")
        assert (no_set.value.status, no_set.value.code) == (404, "unknown_probe_set")
        with pytest.raises(CompCapError) as invalid:
            client.start_probe("productivity", beam_size=0)
        assert invalid.value.status == 422 and invalid.value.details
        assert invalid.value.details[0]["field"] == "beam_size"
    args = [
        "probe",
        "--url",
        gateway,
        "--kind",
        "substitutivity",
        "--probe-set",
        "no-such-set",
        "--api-key",
        KEY,
    ]
    assert main(args) == 2
    assert "unknown_probe_set" in capsys.readouterr().err


@pytest.mark.integration  # starts compcap serve
def test_a_probe_job_runs_to_its_end(
    gateway: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``start_probe`` → ``wait_probe`` → the table, on the repository's own probe sets (skipped when the
    repository has none)."""
    with CompCapClient(gateway, api_key=KEY, trust_env=False) as client:
        sets = {s["kind"]: s["name"] for s in client.probe_sets()}
        if "productivity" not in sets:
            pytest.skip("the tiny repository has no productivity probe set")
        job = client.start_probe("productivity", probe_set=sets["productivity"], images=2, beam_size=2)
        assert job.kind == "productivity" and job.status in {"queued", "running", "succeeded"}
        seen: list[ProbeJob] = []
        done = client.wait_probe(job.id, poll_s=0.1, timeout_s=120, on_progress=seen.append)
        assert done.succeeded and done.result is not None and seen[-1].finished
        assert client.cancel_probe(job.id).status == "succeeded"  # finished: returned as it is
        assert job.id in {j.id for j in client.probes()}
    out = tmp_path / "probe.json"
    args = ["probe", "--url", gateway, "--kind", "productivity", "--images", "2", "--beam-size", "2"]
    assert main([*args, "--api-key", KEY, "--json", str(out), "--poll", "0.1"]) == 0
    printed = capsys.readouterr().out
    assert "productivity" in printed and "by " in printed and out.is_file()
