"""``compcap_client``'s image inputs, ``explain()`` and ``compare()``, and how it is built: every input
form (path, ``Path``, file object, bytes, NumPy, PIL) captioned by both clients against a real
``compcap serve`` on the tiny repository with the same captions; explanations (attention, a gradient
method, a probe image) and comparisons sync and async; the errors, before any request for a bad input
and from the gateway for a bad request; one request per call, identical from both clients; an import
that pulls in none of the server's dependencies; result types that mirror the server's schemas."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import inspect
import io
import json
import os
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from compcap_client import (
    NO_RETRY,
    AsyncCompCapClient,
    CaptionResult,
    CompCapClient,
    CompCapError,
    Explanation,
    ImageFileNotFoundError,
    ProbeImage,
    ProbeJob,
)
from compcap_client.images import image_file, image_files
from tests.integration.conftest import ROOT, free_port, serving

KEY = "client-calls-key-1"
EXAMPLE = ROOT / "docs" / "examples" / "example_0.png"  # 192 x 192 RGB, from the repository
BAN = {"name": "ban_words", "params": {"words": ["a"]}}
CONFIGS = [
    {"name": "BUTD", "model": "butd", "beam_size": 3},
    {"name": "BUTR", "model": "butr", "beam_size": 3, "rerank": False},
    {"name": "BANNED", "model": "butd", "beam_size": 2, "hooks": [BAN]},
]  # fmt: skip
HEAVY = (
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "numpy",
    "PIL",
    "onnxruntime",
    "torch",
    "spacy",
    "export",
)


def pixels(seed: int, size: int = 96) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def png_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def every_form(path: Path) -> dict[str, Any]:
    """The same image in each form the client takes (the arrays hold the file's decoded pixels)."""
    return {
        "str": str(path),
        "Path": path,
        "file": path.open("rb"),
        "bytes": path.read_bytes(),
        "bytearray": bytearray(path.read_bytes()),
        "numpy": np.asarray(Image.open(path).convert("RGB")),
        "PIL": Image.open(path),
    }


def recording(
    answer: Callable[[httpx.Request], httpx.Response] | None = None,
) -> tuple[list[httpx.Request], Any]:
    """A transport stub that keeps every request (read) and answers ``answer`` (default: 200 ``{}``)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return answer(request) if answer else httpx.Response(200, json={})

    return seen, handler


# -- inputs (no gateway) -------------------------------------------------------------------------------


def test_each_input_form_becomes_the_same_image_file(tmp_path: Path) -> None:
    forms = every_form(EXAMPLE)
    raw = EXAMPLE.read_bytes()
    files = {name: image_file(image, "image") for name, image in forms.items()}
    for name in ("str", "Path", "file", "bytes", "bytearray"):  # a file goes as it is
        assert files[name].data == raw and files[name].content_type == "image/png", name
    assert files["str"].name == files["file"].name == "example_0.png"
    for name in ("numpy", "PIL"):  # encoded as PNG, losslessly
        decoded = np.asarray(Image.open(io.BytesIO(files[name].data)))
        assert files[name].content_type == "image/png"
        np.testing.assert_array_equal(decoded, forms["numpy"], err_msg=name)
    grey = image_file(forms["numpy"][..., 0], "image")  # [H, W]
    assert Image.open(io.BytesIO(grey.data)).mode == "L"
    jpeg = tmp_path / "x.jpg"
    Image.open(EXAMPLE).save(jpeg, format="JPEG")
    assert image_file(jpeg).content_type == "image/jpeg"
    assert image_file(memoryview(raw)).data == raw

    batch = np.stack([pixels(0), pixels(1), pixels(2)])  # [N, H, W, 3]: N images
    assert len(image_files(batch)) == 3 and len(image_files(pixels(0))) == 1
    assert len(image_files([EXAMPLE, raw, forms["PIL"]])) == 3
    assert len(image_files(str(EXAMPLE) for _ in range(2))) == 2  # any iterable


@pytest.mark.parametrize(
    ("images", "error", "words"),
    [
        ("no/such/image.png", ImageFileNotFoundError, ["images", "no such file", "no/such/image.png"]),
        (Path("missing.jpg"), FileNotFoundError, ["images", "missing.jpg"]),
        ([EXAMPLE, "gone.png"], ValueError, ["images[1]", "no such file"]),
        ("https://example.com/cat.png", ValueError, ["images", "URL", "download"]),
        (ROOT / "docs", ValueError, ["images", "directory"]),
        ("x" * 5000, ValueError, ["images", "cannot read"]),
        (b"", ValueError, ["images", "empty"]),
        ([], ValueError, ["images", "empty"]),
        (42, TypeError, ["images", "int", "path", "bytes", "NumPy", "PIL"]),
        ([EXAMPLE, 3.5], TypeError, ["images[1]", "float"]),
        ({"a": 1}, TypeError, ["images", "dict"]),
        (np.zeros((8, 8, 3), dtype=np.float32), ValueError, ["images", "float32", "uint8", "255"]),
        (np.zeros((3, 8, 8), dtype=np.uint8), ValueError, ["images", "[3, 8, 8]", "transpose"]),
        (np.zeros((8, 8, 5), dtype=np.uint8), ValueError, ["images", "[8, 8, 5]"]),
        (np.zeros((0, 8, 3), dtype=np.uint8), ValueError, ["images", "empty"]),
    ],
)
def test_a_bad_image_is_refused_before_any_request(
    images: Any, error: type[Exception], words: list[str]
) -> None:
    seen, handler = recording()
    with CompCapClient(transport=httpx.MockTransport(handler)) as client, pytest.raises(error) as raised:
        client.caption(images)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert not seen  # nothing was sent


def test_bad_explain_and_compare_inputs_name_the_argument() -> None:
    seen, handler = recording()
    with CompCapClient(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(ImageFileNotFoundError, match="image: no such file"):
            client.explain("missing.png")
        with pytest.raises(TypeError, match="image: a list is not an image"):
            client.explain([EXAMPLE])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="text mode"), EXAMPLE.open() as text:
            client.explain(text)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"configurations\[1\] must be a mapping"):
            client.compare([EXAMPLE], [{"name": "a", "model": "butd"}, "butr"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"configurations\['b'\]"):
            client.compare([EXAMPLE], {"a": "butd", "b": 3})  # type: ignore[dict-item]
        with pytest.raises(TypeError, match="configurations must be"):
            client.compare([EXAMPLE], "butd")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="images is empty"):
            client.compare([], CONFIGS)
    assert not seen


# -- requests (no gateway) -----------------------------------------------------------------------------


def _canonical(request: httpx.Request) -> tuple[str, str, dict[str, str], bytes]:
    """A request without what differs between two sends of it (the multipart boundary)."""
    content_type = request.headers.get("content-type", "")
    body = request.content
    if "boundary=" in content_type:
        boundary = content_type.split("boundary=")[1]
        body = body.replace(boundary.encode(), b"BOUNDARY")
        content_type = content_type.replace(boundary, "BOUNDARY")
    headers = {k: v for k, v in request.headers.items() if k in {"authorization", "accept", "user-agent"}}
    return request.method, str(request.url), {**headers, "content-type": content_type}, body


SCENE = {"objects": [{"id": 0, "noun": "dog", "bbox": [1, 2, 30, 40]}], "background": "grass", "horizon": 3}


def test_both_clients_send_the_same_requests() -> None:
    """Every call, once on each client against a stub: the same method, URL, headers and body — one
    request builder, two transports."""
    image = pixels(3)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("caption", ([EXAMPLE, image],), {"model": "butr", "rerank": False, "hooks": [{"name": "x"}]}),
        ("caption", (image,), {"rerank": True, "beam_size": 3, "length_penalty": 0.5}),
        ("explain", (EXAMPLE,), {"method": "saliency", "caption": "a dog", "attribute_to": "pixels"}),
        ("explain", (ProbeImage("productivity", 7),), {"overlays": False, "model": "butd"}),
        ("explain", (image,), {"tokens": (5, 9), "scene_graph": SCENE}),
        ("compare", ([image, image], CONFIGS), {}),
        ("compare", ([image], {"A": "butd", "B": {"model": "butr", "rerank": "vsepp"}}), {}),
        ("start_probe", ("systematicity",), {"pairs": ("black cat",), "images": 2}),
        ("cancel_probe", ("job/1",), {}),
        ("compare_probes", ("job/1", "p 2"), {}),
    ]  # fmt: skip
    sync_seen, sync_handler = recording()
    async_seen, async_handler = recording()
    with CompCapClient(api_key="k", transport=httpx.MockTransport(sync_handler)) as client:
        for name, args, kwargs in calls:
            with pytest.raises(CompCapError, match="invalid_response"):  # the stub's {} is not the answer
                getattr(client, name)(*args, **kwargs)

    async def run() -> None:
        async with AsyncCompCapClient(api_key="k", transport=httpx.MockTransport(async_handler)) as client:
            for name, args, kwargs in calls:
                with pytest.raises(CompCapError, match="invalid_response"):
                    await getattr(client, name)(*args, **kwargs)

    asyncio.run(run())
    assert len(sync_seen) == len(calls)
    assert [_canonical(r) for r in sync_seen] == [_canonical(r) for r in async_seen]

    caption = sync_seen[0]
    assert caption.url.path == "/v1/captions" and caption.headers["authorization"] == "Bearer k"
    assert b'name="rerank"\r\n\r\nfalse' in caption.content and b'[{"name": "x"}]' in caption.content
    assert caption.content.count(b'name="image"; filename=') == 2
    assert b'filename="example_0.png"' in caption.content and b'filename="image1.png"' in caption.content
    explain = json.loads(sync_seen[2].content)
    assert explain.keys() == {"image", "method", "caption", "attribute_to"}
    assert Image.open(io.BytesIO(base64.b64decode(explain["image"]))).size == (192, 192)
    assert json.loads(sync_seen[3].content) == {
        "image_ref": {"probe_set": "productivity", "image_id": 7},
        "overlays": False,
        "model": "butd",
    }
    by_tokens = json.loads(sync_seen[4].content)
    assert by_tokens["tokens"] == [5, 9] and by_tokens["scene_graph"]["background"] == "grass"
    compare = json.loads(sync_seen[5].content)
    assert compare["configurations"] == CONFIGS and len(compare["images"]) == 2
    assert json.loads(sync_seen[6].content)["configurations"] == [
        {"name": "A", "model": "butd"},
        {"name": "B", "model": "butr", "rerank": "vsepp"},
    ]
    assert json.loads(sync_seen[7].content) == {"kind": "systematicity", "pairs": ["black cat"], "images": 2}
    assert sync_seen[8].method == "DELETE" and sync_seen[8].url.raw_path == b"/v1/probes/job%2F1"
    assert sync_seen[9].method == "GET" and sync_seen[9].url.raw_path == b"/v1/probes/job%2F1/compare/p%202"


def test_one_retry_loop_serves_both_clients() -> None:
    """A 503 with Retry-After, then the answer: both clients wait, count the retry and parse it."""
    body = {"jobs": [{"id": "j", "status": "running", "progress": {"done": 1, "total": 2}}]}

    def answers() -> Callable[[httpx.Request], httpx.Response]:
        busy = {"error": {"code": "overloaded", "message": "full"}}
        state = iter(
            [httpx.Response(503, json=busy, headers={"Retry-After": "0"}), httpx.Response(200, json=body)]
        )
        return lambda _: next(state)

    with CompCapClient(transport=httpx.MockTransport(answers())) as client:
        assert [j.done for j in client.probes()] == [1] and client.retries == 1

    async def run() -> int:
        async with AsyncCompCapClient(transport=httpx.MockTransport(answers())) as client:
            assert [j.id for j in await client.probes()] == ["j"]
            return client.retries

    assert asyncio.run(run()) == 1


def test_methods_are_written_once_with_real_signatures() -> None:
    sync, aio = CompCapClient(), AsyncCompCapClient()
    for name in ("caption", "explain", "compare", "models", "wait_probe", "start_probe", "compare_probes"):
        sync_method, async_method = getattr(sync, name), getattr(aio, name)
        assert inspect.signature(sync_method) == inspect.signature(async_method), name
        assert "self" not in inspect.signature(sync_method).parameters
        assert inspect.iscoroutinefunction(async_method) and not inspect.iscoroutinefunction(sync_method)
        assert sync_method.__doc__ and sync_method.__doc__ == getattr(CompCapClient, name).__doc__
    assert list(inspect.signature(sync.explain).parameters)[:3] == ["image", "method", "caption"]
    sync.close()
    asyncio.run(aio.aclose())


def test_the_import_is_light() -> None:
    """``import compcap_client`` (and a caption of bytes) loads none of the server's dependencies —
    not even numpy or PIL, which come only with such an image."""
    code = (
        "import json, sys, httpx\n"
        "import compcap_client as c\n"
        "loaded = sorted(sys.modules)\n"
        "t = httpx.MockTransport(lambda r: httpx.Response(200, json={'jobs': []}))\n"
        "with c.CompCapClient(transport=t) as client:\n"
        "    try:\n"
        "        client.caption(open(sys.argv[1], 'rb').read())\n"
        "    except c.CompCapError:\n"
        "        pass\n"
        "print(json.dumps([loaded, sorted(sys.modules)]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(  # from client/: the checkout's package, not an installed one
        [sys.executable, "-c", code, str(EXAMPLE)],
        cwd=ROOT / "client",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for modules in json.loads(out.stdout):
        heavy = [m for m in modules if m.split(".")[0] in HEAVY]
        assert not heavy, heavy
        assert not [m for m in modules if m.split(".")[0] in ("service", "export", "loadtests")]


def test_result_types_mirror_the_server_schemas() -> None:
    """Each dataclass has a field for every field of the pydantic model it reads (no field dropped)."""
    from compcap_client import results
    from service.api import schemas as api
    from service.compare import schemas as compare
    from service.explain import schemas as explain
    from service.probes.http import endpoints as probes

    pairs: list[tuple[Any, Any]] = [
        (results.Caption, api.CaptionOut),
        (results.ImageCaptions, api.ImageResult),
        (results.Timings, api.Timings),
        (results.CaptionResult, api.CaptionResponse),
        (results.Explanation, explain.ExplainResponse),
        (results.ExplainedWord, explain.ExplainedWord),
        (results.UnderArgmax, explain.UnderArgmax),
        (results.IntegratedGradientsInfo, explain.IntegratedGradientsInfo),
        (results.GuidedBackpropInfo, explain.GuidedBackpropInfo),
        (results.Comparison, compare.CompareResponse),
        (results.ComparedConfiguration, compare.ComparedConfiguration),
        (results.ResolvedConfiguration, compare.ResolvedConfiguration),
        (results.ComparedImage, compare.ComparedImage),
        (results.PairSimilarity, compare.PairSimilarity),
        (results.GroundingInterval, explain.GroundingInterval),
        (results.Interval, probes.Interval),
        (results.PairedTest, probes.PairedTest),
        (results.ProbeComparison, probes.ProbeComparison),
        (results.ProbeJob, probes.ProbeJobResponse),
        (results.ProbeKindInfo, probes.ProbeKindInfo),
        (results.SetFormatInfo, probes.SetFormatInfo),
        (results.FigureInfo, probes.FigureInfo),
    ]
    flattened = {results.ProbeJob: {"progress"}}  # ProbeJob holds progress as done and total
    for mine, theirs in pairs:
        have = {f.name for f in dataclasses.fields(mine)}
        missing = set(theirs.model_fields) - have - flattened.get(mine, set())
        assert not missing, f"{mine.__name__} lacks {sorted(missing)} of {theirs.__name__}"
    assert set(probes.ProbeProgress.model_fields) <= {f.name for f in dataclasses.fields(results.ProbeJob)}
    # the typed intervals: what the explain answer's model says, the client reads as a GroundingInterval
    grounding = explain.ExplainResponse.model_fields["grounding_score_interval"].annotation
    assert "GroundingInterval" in str(grounding)
    hints = typing.get_type_hints(results.Explanation, vars(results))
    assert hints["grounding_score_interval"] == (dict[str, results.GroundingInterval] | None)


def test_probe_results_read_their_intervals_and_comparisons() -> None:
    """``ProbeJob.interval`` finds a figure's ``X_interval`` sibling at any depth (mappings and lists);
    a comparison's figures are typed paired tests; an explanation's intervals are ``GroundingInterval`` s."""
    from compcap_client import GroundingInterval, Interval, PairedTest, ProbeComparison

    iv = {"estimate": 0.2, "low": 0.1, "high": 0.35, "se": 0.06, "groups": 6, "units": 18}
    job = ProbeJob.from_json(
        {
            "id": "p1",
            "status": "succeeded",
            "result": {
                "held_out": {"recall": {"5": 0.2, "1": None}, "recall_interval": {"5": iv, "1": None}},
                "pairs": [{"pair": "black cat", "outcomes": {"hit": 0.2}, "outcome_intervals": {"hit": iv}}],
            },
        }
    )
    assert job.interval("held_out", "recall", "5") == Interval(0.2, 0.1, 0.35, 0.06, 6, 18)
    assert job.interval("held_out", "recall", 5) == job.interval("held_out", "recall", "5")
    assert job.interval("pairs", 0, "outcomes", "hit") == job.interval("held_out", "recall", "5")
    assert job.interval("held_out", "recall", "1") is None  # a figure without units
    assert job.interval("held_out", "recall", "9") is None and job.interval("pairs", 3, "outcomes") is None
    assert ProbeJob.from_json({"id": "p2", "status": "running"}).interval("held_out", "recall", "5") is None
    with pytest.raises(ValueError, match="path"):
        job.interval()
    found = job.interval("held_out", "recall", "5")
    assert found is not None and 0.25 in found and 0.4 not in found
    assert found.half_width == pytest.approx(0.125)
    comparison = ProbeComparison.from_json(
        {
            "a": "p1",
            "b": "p2",
            "kind": "systematicity",
            "probe_set": "systematicity",
            "figures": {"held_out.recall_at_5": {"difference": iv, "p_value": 0.04, "permutations": 999},
                        "seen.recall_at_5": None},
            "intervals": {"level": 0.95},
            "new_field": 1,  # a newer gateway's: ignored
        }
    )  # fmt: skip
    assert comparison["held_out.recall_at_5"] == PairedTest(Interval.from_json(iv), 0.04, 999)
    assert comparison.figures["seen.recall_at_5"] is None and comparison.intervals == {"level": 0.95}
    words = [{"index": 0, "word": "dog", "noun": "dog", "logprob": -1.0, "values": [0.5], "argmax_region": 0}]
    explanation = Explanation.from_json(
        {
            **{k: "x" for k in ("model", "method", "attribute_to", "caption", "source")},
            **{"grid": None, "grid_area": [0, 0, 1, 1], "image_size": [8, 8], "scene_graph": True},
            "words": words,
            "grounding_score": {"0": 0.62},
            "grounding_score_interval": {"0": {"low": 0.41, "high": 0.8, "nouns": 3}},
        }
    )
    assert explanation.grounding_score_interval == {"0": GroundingInterval(0.41, 0.8, 3)}


# -- against a real gateway ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway app under uvicorn on the tiny repository, with an API key (explain and compare
    need it)."""
    port = free_port()
    app = [
        "uvicorn",
        "service.gateway.app:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {
        **os.environ,
        "COMPCAP_REPO": str(tiny_repo),
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_API_KEYS": KEY,
        "COMPCAP_STATE_URL": "",
    }
    log = tmp_path_factory.mktemp("client-calls") / "serve.log"
    with serving([sys.executable, "-m", *app], env, port, log) as url:
        yield url


def client(url: str) -> CompCapClient:
    return CompCapClient(url, api_key=KEY, trust_env=False, timeout=120)


def async_client(url: str) -> AsyncCompCapClient:
    return AsyncCompCapClient(url, api_key=KEY, trust_env=False, timeout=120)


def captions(out: CaptionResult) -> list[list[str]]:
    return [r.texts for r in out.results]


@pytest.mark.integration  # starts compcap serve
def test_every_input_form_gets_the_same_captions_from_both_clients(gateway: str) -> None:
    options: dict[str, Any] = {"model": "butr", "beam_size": 3, "n_best": 2, "rerank": False}
    with client(gateway) as sync:
        expected = captions(sync.caption(EXAMPLE.read_bytes(), **options))[0]
        forms = every_form(EXAMPLE)
        for name, image in forms.items():
            assert captions(sync.caption(image, **options)) == [expected], name
        mixed = sync.caption(list(every_form(EXAMPLE).values()), **options)  # one request, every form
        assert [r.index for r in mixed.results] == list(range(len(forms)))
        assert captions(mixed) == [expected] * len(forms)
        batch = np.stack([forms["numpy"], pixels(1, 192)])  # [2, H, W, 3]
        assert captions(sync.caption(batch, **options))[0] == expected

    async def run() -> list[list[list[str]]]:
        async with async_client(gateway) as aio:
            outs = await asyncio.gather(
                *(aio.caption(image, **options) for image in every_form(EXAMPLE).values())
            )
            return [captions(out) for out in outs]

    assert asyncio.run(run()) == [[expected]] * len(forms)


@pytest.mark.integration  # starts compcap serve
def test_explain_attention_a_gradient_method_and_a_probe_image(gateway: str, tiny_repo: Path) -> None:
    from service.manifest import load_manifest
    from service.probesets import repo_probe_sets

    image_id = repo_probe_sets(tiny_repo, load_manifest(tiny_repo))["productivity"].image_ids[0]
    with client(gateway) as sync:
        best = sync.caption(EXAMPLE, model="butd", beam_size=3).results[0].caption
        why = sync.explain(EXAMPLE, model="butd", beam_size=3)  # attention: no torch
        assert (why.method, why.source, why.model, why.caption) == ("attention", "engine", "butd", best)
        assert why.texts == best.split() and why.grid == [6, 6] and not why.scene_graph
        word = why.words[0]
        assert np.array(word.values).shape == (6, 6) and 0 <= word.argmax_region < 36
        assert word.overlay is not None and Image.open(io.BytesIO(word.overlay)).format == "PNG"
        assert why.grounding_score is None and why.integrated_gradients is None

        given = sync.explain(
            ProbeImage("productivity", image_id), caption="a dog on the grass", overlays=False
        )
        assert given.source == "client" and given.texts == ["a", "dog", "on", "the", "grass"]
        assert given.scene_graph and list(given.grounding_score or {}) == ["0", "1", "3", "5", "inf"]
        assert list(given.grounding_score_interval or {}) == ["0", "1", "3", "5", "inf"]
        zero = (given.grounding_score_interval or {})["0"]
        assert zero.low <= (given.grounding_score or {})["0"] <= zero.high and zero.nouns >= 1
        dog = given.words[1]
        assert dog.noun == "dog" and dog.overlay is None and isinstance(dog.grounded, bool)
        assert dog.under_argmax is not None and isinstance(dog.under_argmax.labels, list)

        ids = sync.caption(EXAMPLE, model="butd", beam_size=3).results[0].captions[0].tokens
        exact = sync.explain(EXAMPLE, model="butd", tokens=ids, overlays=False)
        assert exact.source == "client" and exact.caption == best and len(exact.words) == len(ids)

        saliency = sync.explain(pixels(5), method="saliency", attribute_to="pixels", overlays=False)
        assert saliency.method == "saliency" and saliency.attribute_to == "pixels" and saliency.words

    async def run() -> tuple[Any, Any]:
        async with async_client(gateway) as aio:
            return await asyncio.gather(
                aio.explain(EXAMPLE, model="butd", beam_size=3),
                aio.explain(Image.open(EXAMPLE), method="integrated_gradients", n_steps=4, overlays=False),
            )

    attention, ig = asyncio.run(run())
    assert attention.texts == why.texts and attention.words[0].values == why.words[0].values
    assert ig.method == "integrated_gradients" and ig.integrated_gradients is not None
    assert ig.integrated_gradients.n_steps == 4 and len(ig.integrated_gradients.delta) == len(ig.words)


@pytest.mark.integration  # starts compcap serve
def test_compare_gives_each_configurations_caption_on_both_clients(gateway: str) -> None:
    images: list[Any] = [EXAMPLE, pixels(7), Image.open(ROOT / "docs" / "examples" / "example_1.png")]
    with client(gateway) as sync:
        diff = sync.compare(images, CONFIGS)
        assert [c.name for c in diff.configurations] == ["BUTD", "BUTR", "BANNED"]
        assert (
            diff.configurations[1].resolved.ranker is None and diff.configurations[0].resolved.beam_size == 3
        )
        assert sorted(i.index for i in diff.images) == [0, 1, 2]
        assert [i.min_ngsm for i in diff.images] == sorted(
            i.min_ngsm for i in diff.images
        )  # most discrepant first
        first = diff.by_index()[0]
        assert first.captions["BUTD"] == sync.caption(EXAMPLE, model="butd", beam_size=3).results[0].caption
        assert (
            first.captions["BUTR"]
            == sync.caption(EXAMPLE, model="butr", beam_size=3, rerank=False).results[0].caption
        )
        assert "a" not in first.captions["BANNED"].split()
        assert len(first.pairs) == 3 and all(0.0 <= p.ngsm <= 1.0 for p in first.pairs)
        assert set(first.most_discrepant_pair) <= {"BUTD", "BUTR", "BANNED"}

        short = sync.compare(EXAMPLE, {"D": "butd", "R": {"model": "butr", "rerank": False, "beam_size": 3}})
        assert [c.name for c in short.configurations] == ["D", "R"] and len(short.images) == 1

    async def run() -> Any:
        async with async_client(gateway) as aio:
            return await aio.compare(images, CONFIGS)

    again = asyncio.run(run())
    assert [i.captions for i in again.by_index()] == [i.captions for i in diff.by_index()]


@pytest.mark.integration  # starts compcap serve
def test_gateway_errors_of_explain_and_compare(gateway: str) -> None:
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any], int, str]] = [
        ("explain", (EXAMPLE,), {"model": "nope"}, 404, "model"),
        ("explain", (EXAMPLE,), {"caption": "a zebra"}, 422, "caption"),
        ("explain", (EXAMPLE,), {"method": "magic"}, 422, "method"),
        ("explain", (EXAMPLE,), {"method": "attention", "attribute_to": "pixels"}, 422, "attribute_to"),
        ("explain", (ProbeImage("nope", 0),), {}, 404, "unknown_probe_set"),
        ("explain", (b"not an image",), {}, 400, "image"),
        ("compare", ([EXAMPLE], [CONFIGS[0]]), {}, 422, "configurations"),
        ("compare", ([EXAMPLE], [CONFIGS[0], CONFIGS[0]]), {}, 422, "unique"),
        ("compare", ([EXAMPLE], {"A": "butd", "B": "nope"}), {}, 404, "nope"),
        ("compare", ([EXAMPLE], {"A": "butd", "B": {"model": "butr", "beamsize": 3}}), {}, 422, "beamsize"),
    ]  # fmt: skip
    with client(gateway) as sync:
        for name, args, kwargs, status, word in cases:
            with pytest.raises(CompCapError) as raised:
                getattr(sync, name)(*args, **kwargs)
            error = raised.value
            where = " ".join([error.code, error.message, *(str(d.get("field")) for d in error.details or [])])
            assert error.status == status and word in where, (name, kwargs, error, error.details)
    with (
        CompCapClient(gateway, trust_env=False, retry=NO_RETRY) as anonymous,
        pytest.raises(CompCapError) as missing,
    ):
        anonymous.explain(EXAMPLE)
    assert missing.value.status == 401

    async def run() -> CompCapError:
        async with async_client(gateway) as aio:
            try:
                await aio.compare([EXAMPLE], [CONFIGS[0]])
            except CompCapError as exc:
                return exc
        raise AssertionError("no error")

    assert asyncio.run(run()).status == 422


@pytest.mark.integration  # starts compcap serve
def test_compare_probes_gives_typed_paired_tests_on_both_clients(gateway: str) -> None:
    """Two systematicity jobs on the same images (two captioners): ``compare_probes`` gives the
    gateway's paired tests typed, the same from both clients; a job's ``interval`` reads its result's
    intervals; an unknown job is the gateway's 404."""
    from compcap_client import PairedTest

    with client(gateway) as sync:
        if not any(s["kind"] == "systematicity" for s in sync.probe_sets()):
            pytest.skip("the tiny repository has no systematicity probe set")
        started = [
            sync.start_probe("systematicity", model=m, rerank=False, beam_size=2, images=2)
            for m in ("butd", "butr")
        ]
        a, b = (sync.wait_probe(j.id, poll_s=0.2, timeout_s=240) for j in started)
        assert a.succeeded and b.succeeded and a.result is not None and b.result is not None
        out = sync.compare_probes(a.id, b.id)
        raw = httpx.get(
            f"{gateway}/v1/probes/{a.id}/compare/{b.id}",
            headers={"Authorization": f"Bearer {KEY}"},
            trust_env=False,
            timeout=60,
        ).json()
        assert (out.a, out.b, out.kind, out.probe_set) == (a.id, b.id, "systematicity", raw["probe_set"])
        assert set(out.figures) == set(raw["figures"]) and out.intervals == raw["intervals"]
        for name, test in out.figures.items():
            want = raw["figures"][name]
            if want is None:
                assert test is None
                continue
            assert isinstance(test, PairedTest) and test.p_value == want["p_value"]
            d = test.difference
            assert (d.estimate, d.low, d.high, d.units) == tuple(
                want["difference"][f] for f in ("estimate", "low", "high", "units")
            )
        held = out["held_out.recall_at_5"]
        assert held is not None and held.difference.estimate == pytest.approx(
            a.result["held_out"]["recall"]["5"] - b.result["held_out"]["recall"]["5"]
        )
        mine = a.interval("held_out", "recall", "5")
        assert mine is not None and mine.low == a.result["held_out"]["recall_interval"]["5"]["low"]
        assert mine.estimate == pytest.approx(a.result["held_out"]["recall"]["5"])
        with pytest.raises(CompCapError) as unknown:
            sync.compare_probes(a.id, "no-such-job")
        assert unknown.value.status == 404 and unknown.value.code == "unknown_job"

    async def run() -> Any:
        async with async_client(gateway) as aio:
            return await aio.compare_probes(a.id, b.id)

    assert asyncio.run(run()) == out
