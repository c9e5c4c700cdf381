"""Decoding hooks through the HTTP API on the real tiny repository: effects, O/S captions, 422 errors
naming the hook and parameter, the hook catalogue and the hook-application counter."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from service.manifest import Manifest
from service.text.vocabulary import Vocabulary
from tests.api.test_captions_api import png, post_images


def caption_json(client: TestClient, hooks: list[dict] | None, seed: int = 11, **extra: object) -> dict:
    import base64

    body = {"images": [base64.b64encode(png(seed)).decode()], "rerank": False, "beam_size": 4, **extra}
    if hooks is not None:
        body["hooks"] = hooks
    response = client.post("/v1/captions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def words(result: dict) -> set[str]:
    return {w for c in result["captions"] for w in c["text"].split()}


def test_catalogue_lists_every_hook(client: TestClient) -> None:
    names = [h["name"] for h in client.get("/v1/hooks").json()["hooks"]]
    assert names == [
        "ban_words",
        "no_repeat_ngram",
        "min_length",
        "synonym_substitution",
        "diverse_beam",
        "force_words",
        "ranker_guided",
    ]


def test_ban_words_removes_a_word_the_plain_search_uses(client: TestClient) -> None:
    plain = caption_json(client, None)["results"][0]
    banned = plain["caption"].split()[0]
    hooked = caption_json(client, [{"name": "ban_words", "params": {"words": [banned]}}])
    assert hooked["hooks"] == ["ban_words"]
    assert banned in words(plain) and banned not in words(hooked["results"][0])


def test_synonym_substitution_returns_original_and_substituted(
    client: TestClient,
    manifest: Manifest,
) -> None:
    plain = caption_json(client, None)["results"][0]["caption"]
    vocab = Vocabulary.load(client.app.state.runtime.settings.repo / manifest.vocabulary.file)
    source = plain.split()[0]  # the argmax word of the first step (one row per image)
    target = next(w for w in vocab.words[4:] if w not in plain.split())
    hooks = [{"name": "synonym_substitution", "params": {"pairs": [[source, target]]}}]
    result = caption_json(client, hooks)["results"][0]
    assert result["original_caption"] == plain  # O: the same search without the hook
    # S: the first word was the argmax, so it became the synonym, with probability 1
    assert result["caption"].split()[0] == target and target in words(result)
    assert result["original_captions"][0]["text"] == plain


def test_hooks_in_a_multipart_query_string(client: TestClient) -> None:
    hooks = json.dumps([{"name": "no_repeat_ngram", "params": {"n": 1}}])
    response = post_images(client, png(12), hooks=hooks, rerank="false")
    assert response.status_code == 200, response.text
    for caption in response.json()["results"][0]["captions"]:
        tokens = caption["text"].split()
        assert len(tokens) == len(set(tokens))


def test_bad_hooks_are_422_naming_them(client: TestClient) -> None:
    import base64

    image = base64.b64encode(png(13)).decode()
    cases = [
        ([{"name": "nope"}], "hooks.0.name", "unknown hook"),
        ([{"name": "ban_word", "params": {"words": ["a"]}}], "hooks.0.name", "(did you mean 'ban_words'?)"),
        ([{"name": "ban_words", "params": {"word": ["a"]}}], "hooks.0.params.word", "did you mean 'words'"),
        ([{"name": "no_repeat_ngram", "params": {"n": 0}}], "hooks.0.params.n", ">= 1"),
        ([{"name": "ban_words", "params": {"words": ["zzzz"]}}], "hooks.0.params.words", "zzzz"),
        (
            [{"name": "diverse_beam", "params": {"groups": 3}}],
            "hooks.0.params.groups",
            "divide the beam size 4",
        ),
        (
            [
                {"name": "ban_words", "params": {"ids": [5]}},
                {"name": "min_length", "params": {"min_words": 99}},
            ],
            "hooks.1.params.min_words",
            "max_length",
        ),
        ([{"name": "min_length", "params": {"min_words": 2, "extra": 1}}], "hooks.0.params.extra", "unknown"),
    ]
    for hooks, field, text in cases:
        response = client.post("/v1/captions", json={"images": [image], "beam_size": 4, "hooks": hooks})
        assert response.status_code == 422, (hooks, response.text)
        detail = response.json()["error"]
        assert detail["details"][0]["field"] == field and text in detail["message"], detail
    not_json = post_images(client, png(13), hooks="[{")
    assert not_json.status_code == 422 and "hooks" in not_json.text
    assert caption_json(client, None)["results"][0]["caption"]  # still serving


def test_hook_applications_are_counted(client: TestClient) -> None:
    def count() -> float:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith('compcap_hook_applications_total{hook="min_length"}'):
                return float(line.split()[-1])
        return 0.0

    before = count()
    result = caption_json(client, [{"name": "min_length", "params": {"min_words": 3}}], max_length=5)
    assert all(len(c["tokens"]) >= 3 for c in result["results"][0]["captions"])
    assert count() - before >= 3  # one per decoding step of the request


GUIDED = {"name": "ranker_guided", "params": {"every": 1, "weight": 2.0, "pool": 4}}


def test_ranker_guided_answers_and_changes_the_search(client: TestClient) -> None:
    seeds = range(20, 26)
    plain = [caption_json(client, None, seed=s)["results"][0] for s in seeds]
    guided = [caption_json(client, [GUIDED], seed=s) for s in seeds]
    assert all(g["hooks"] == ["ranker_guided"] for g in guided)
    results = [g["results"][0] for g in guided]
    assert all(r["caption"] for r in results)
    # the search keeps other beams than the captioner's own best on some image
    assert [p["captions"] for p in plain] != [r["captions"] for r in results]


def test_ranker_guided_at_weight_zero_is_plain_beam_search(client: TestClient) -> None:
    for seed, rerank in ((30, False), (31, True), (32, False)):
        extra = {"rerank": rerank, "beam_size": 5, "n_best": 3}
        plain = caption_json(client, None, seed=seed, **extra)
        zero = {"name": "ranker_guided", "params": {"weight": 0, "pool": 2, "every": 2, "ranker": "vsepp"}}
        hooked = caption_json(client, [zero], seed=seed, **extra)
        assert hooked["hooks"] == ["ranker_guided"]
        assert hooked["results"] == plain["results"]  # text, tokens, log-probs, ranker scores: exactly


def test_ranker_guided_stays_on_its_own_request_in_a_shared_batch(tiny_repo: Path) -> None:
    import asyncio

    import numpy as np

    from service.engine.engine import CaptionEngine
    from service.images.decode import decode_image

    async def run() -> tuple[list, list, list]:
        engine = await CaptionEngine.from_repo(tiny_repo, intra_op_threads=1)
        try:
            size = engine.manifest.image
            pics = np.stack(
                [
                    decode_image(png(40 + i), size.height, size.width, max_bytes=1 << 24, max_pixels=1 << 24)
                    for i in range(3)
                ]
            )
            plain = engine.resolve(beam_size=4, rerank=False)
            guided = engine.resolve(beam_size=4, rerank=False, hooks=[GUIDED])
            alone = (await engine.caption(pics, plain)).results
            together = await asyncio.gather(
                engine.caption(pics, plain), engine.caption(pics, guided), engine.caption(pics[:1], plain)
            )
            guided_alone = (await engine.caption(pics, guided)).results
            return alone, [t.results for t in together], guided_alone
        finally:
            await engine.close()

    alone, together, guided_alone = asyncio.run(run())
    assert together[0] == alone and together[2] == alone[:1]  # the plain requests beside it: untouched
    assert together[1] == guided_alone  # and it is the same beside them as alone


def test_ranker_guided_bad_params_are_422_naming_them(client: TestClient) -> None:
    import base64

    image = base64.b64encode(png(14)).decode()
    cases = [
        ({"every": 0}, "hooks.0.params.every", ">= 1"),
        ({"weight": -1}, "hooks.0.params.weight", ">= 0"),
        ({"weight": 1000}, "hooks.0.params.weight", "<= 100"),
        ({"pool": 51}, "hooks.0.params.pool", "<= 50"),
        ({"pool": "x"}, "hooks.0.params.pool", "integer"),
        ({"ranker": "vsep"}, "hooks.0.params.ranker", "did you mean 'vsepp'"),
        ({"lambda": 1}, "hooks.0.params.lambda", "unknown parameter"),
    ]
    for params, field, text in cases:
        hooks = [{"name": "ranker_guided", "params": params}]
        response = client.post("/v1/captions", json={"images": [image], "beam_size": 4, "hooks": hooks})
        assert response.status_code == 422, (params, response.text)
        detail = response.json()["error"]
        assert detail["details"][0]["field"] == field and text in detail["message"], detail
    # the cost bound: beam_size × (pool + 1) partial captions per image per ranker call
    hooks = [{"name": "ranker_guided", "params": {"pool": 50}}]
    response = client.post("/v1/captions", json={"images": [image], "beam_size": 100, "hooks": hooks})
    assert response.status_code == 422 and "hooks.0.params.pool" in response.text, response.text
    # BUTD has no ranker of its own: the hook must name one
    hooks = [{"name": "ranker_guided"}]
    response = client.post("/v1/captions", json={"images": [image], "model": "butd", "hooks": hooks})
    assert response.status_code == 422 and "hooks.0.params.ranker" in response.text, response.text
