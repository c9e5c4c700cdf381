"""Every feature on an imported captioner: live probes on probe sets built from a COCO-format folder,
and ``compcap-lab mad``.

A tiny random ViT + GPT-2 snapshot is imported twice into a copy of the tiny repository: once plainly
(its training data is not known here) and once with ``--held-out-pairs``. ``compcap probeset --repo``
builds a systematicity and a productivity set from a small COCO-format folder (instance annotations, no
scene graphs) into the repository and lists them in its manifest; the gateway's probe jobs decode the
imported captioners on them (``probe_set`` of ``POST /v1/probes``). A systematicity result splits the
pairs into held out and seen only for the import that declared its held-out pairs; for the other it
reports per-pair recall and their mean over every pair (``held_out`` unknown). ``compcap-lab mad`` ranks the
imported captioner against a built-in one in one run, its hooks checked against its own tokenizer.

The captioners are random, so no figure is pinned: each is checked against what the scoring functions
give on the captions the job decoded (recorded on their way out of the real ``decode``), the MAD
report against the captions in its own state file."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from compcap_lab.cli import main as lab
from compcap_lab.snapshots import vit_gpt2
from compcap_lab.studies.mad.pool import coco_pool, iid_scores, pool_from_state
from compcap_lab.studies.mad.scoring import Referee
from compcap_lab.studies.mad.study import run_study
from service.cli import main
from service.compare.repetition import duplicated_rate
from service.gateway.app import create_app
from service.manifest import load_manifest, repo_probe_set_entries
from service.probes.kinds import productivity_kind as productivity_kind
from service.probes.kinds import systematicity_kind as systematicity_kind
from service.probes.scoring.productivity import productivity_result
from service.probes.scoring.systematicity import systematicity_result, with_intervals
from service.probesets import load_probe_set, repo_probe_sets
from service.settings import Settings
from service.text.concepts import ConceptPair
from service.text.vocabulary import Vocabulary
from tests.api.conftest import wait_ready
from tests.hf_checks import refuse_network
from tests.hf_repo import coco_folder, import_offline

NAME = "vitgpt2"  # imported without --held-out-pairs
DECLARED = "vitgpt2_held"  # the same snapshot, imported with --held-out-pairs
SETS = {"systematicity": "coco_systematicity", "productivity": "coco_productivity"}
PER_PAIR = 3
IMAGES = 2  # images per pair / bucket a probe job decodes
BEAM = 3


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return coco_folder(tmp_path_factory.mktemp("coco") / "data", images=160, seed=11)


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, coco: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny repository with the COCO sets added by ``compcap probeset --repo`` and the snapshot
    imported as NAME and, declaring three pairs with Test-Comb images held out, as DECLARED."""
    root = tmp_path_factory.mktemp("hf_sets")
    out = root / "model_repo"
    shutil.copytree(tiny_repo, out)
    for kind, name in SETS.items():
        argv = ["probeset", "--data", str(coco), "--kind", kind, "--repo", str(out), "--name", name]
        assert main([*argv, "--per-pair", str(PER_PAIR), "--seed", "1"]) == 0
    pairs = [p.pair for p in load_probe_set(out / "probes" / SETS["systematicity"]).pairs() if p.comb][:3]
    assert len(pairs) == 3
    held = root / "held_out.json"
    held.write_text(json.dumps([{"kind": p.kind, "modifier": p.modifier, "noun": p.noun} for p in pairs]))
    snapshot = vit_gpt2.build(root / "vit-gpt2", image_size=64)
    import_offline(snapshot, NAME, out)
    import_offline(snapshot, DECLARED, out, held_out_pairs=held)
    return out


def test_probeset_adds_a_coco_set_to_the_repository(
    repo: Path, coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load_manifest(repo)
    entries = {e.name: e for e in repo_probe_set_entries(repo, manifest)}
    assert {"systematicity", "productivity", "substitutivity"} <= set(entries)  # the SceneWorld sets stay
    sets = repo_probe_sets(repo, manifest)
    for kind, name in SETS.items():
        entry = entries[name]
        # no SceneWorld scene graphs, but its instance boxes serve as such for explanations
        assert (entry.kind, entry.path, entry.scene_graphs) == (kind, f"probes/{name}", True)
        assert entry.source == str(coco.resolve()) and entry.world_seed is None
        assert entry.images == len(sets[name].image_ids) > 0
    assert sets[SETS["productivity"]].objects() is not None  # from instances.json
    assert manifest.captioner(NAME).training.held_out_known is False
    assert manifest.captioner(DECLARED).training.held_out_known is True
    assert manifest.captioner("butd").training.held_out_known is True  # trained here
    before = (repo / "manifest.json").read_bytes()
    base = ["probeset", "--data", str(coco), "--kind", "productivity"]
    model = f"{NAME}_step"
    for out in (tmp_path / "outside", repo / model, repo / "probes" / ".." / model, repo / "probes"):
        assert main([*base, "--repo", str(repo), "--out", str(out)]) == 2  # never a model's folder
        assert "a repository's probe set is a folder of" in capsys.readouterr().err
    assert main([*base, "--repo", str(repo), "--name", f"../{model}"]) == 2
    assert "a repository's probe set is a folder of" in capsys.readouterr().err
    assert (repo / model / "1" / "model.onnx").is_file()
    assert main([*base, "--repo", str(tmp_path)]) == 2
    assert "not a model repository" in capsys.readouterr().err
    assert main(base) == 2
    assert "--out" in capsys.readouterr().err
    assert (repo / "manifest.json").read_bytes() == before


def test_explanations_of_a_coco_image_point_at_its_instance_boxes(repo: Path, coco: Path) -> None:
    """A COCO set's instance boxes are its explanations' scene: the pointing game of a noun is played
    against its boxes, scaled from the 32-pixel images of the folder to the 96 pixels the gateway
    serves, and GroundingScore is computed."""
    from service.explain.geometry import cell_boxes, centre_inside
    from service.text.lexicon import default_lexicon

    instances = json.loads((coco / "instances.json").read_text())
    probe = repo_probe_sets(repo, load_manifest(repo))[SETS["productivity"]]
    assert probe.scenes is not None
    image_id = next(i for i in probe.image_ids if probe.scenes[i]["objects"])
    scene = probe.scenes[image_id]
    assert scene["size"] == [32, 32]
    noun = scene["objects"][0]["noun"]
    x, y, w, h = next(a["bbox"] for a in instances["annotations"] if a["image_id"] == image_id)
    assert scene["objects"][0]["bbox"] == [x, y, x + w, y + h]  # COCO's [x, y, w, h] read as corners
    boxes = [[v * 3 for v in o["bbox"]] for o in scene["objects"] if o["noun"] == noun]
    chance = sum(any(centre_inside(c, b) for b in boxes) for c in cell_boxes(4, 96, 96)) / 16
    ref = {"probe_set": SETS["productivity"], "image_id": image_id}
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1))) as client:
        wait_ready(client)
        answer = client.post(
            "/v1/explain",
            json={"model": NAME, "image_ref": ref, "method": "attention", "caption": f"a {noun}"},
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["scene_graph"] is True and body["grounding_score"] is not None
    entry = next(e for e in body["words"] if e["word"] == noun)
    assert entry["noun"] == default_lexicon().noun_class(noun) and entry["pointing"] is not None
    assert entry["pointing_chance"] == pytest.approx(chance)


Recorder = dict[tuple[str, str], dict[int, list[str]]]  # (probe set, model) -> image id -> captions


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, seen: Recorder) -> None:
    """Record the captions the kind's real ``decode`` returns, by probe set and model."""
    real: Callable[..., Awaitable[dict[int, list[str]]]] = module.decode

    async def decode(
        engine: Any, probe_set: Any, ids: Any, params: Any, progress: Any
    ) -> dict[int, list[str]]:
        out = await real(engine, probe_set, ids, params, progress)
        seen.setdefault((probe_set.name, params.model), {}).update(out)
        return out

    monkeypatch.setattr(module, "decode", decode)


def _finish(client: TestClient, job_id: str, timeout_s: float = 300.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/probes/{job_id}").json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"probe {job_id} still {body['status']} after {timeout_s} s: {body['progress']}")


def _run(client: TestClient, kind: str, model: str) -> dict[str, Any]:
    body = {"kind": kind, "model": model, "probe_set": SETS[kind], "beam_size": BEAM, "images": IMAGES}
    started = client.post("/v1/probes", json=body)
    assert started.status_code == 202, started.text
    job = _finish(client, started.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["probe_set"] == SETS[kind] and job["params"]["model"] == model and job["summary"]
    assert job["progress"]["done"] == job["progress"]["total"] > 0
    return job


def _as_json(value: Any) -> Any:
    """``value`` as the job's JSON carries it."""
    return json.loads(json.dumps(value))


def test_probes_on_coco_sets_report_held_out_only_when_declared(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: Recorder = {}
    _spy(monkeypatch, systematicity_kind, seen)
    _spy(monkeypatch, productivity_kind, seen)
    settings = Settings(repo=repo, intra_op_threads=1, state_url=f"sqlite:///{tmp_path / 'state.db'}")
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        listed = {s["name"]: s for s in client.get("/v1/probe-sets").json()["probe_sets"]}
        assert listed[SETS["systematicity"]]["kind"] == "systematicity"
        assert len(listed[SETS["systematicity"]]["pairs"]) == 24
        declared = _run(client, "systematicity", DECLARED)
        plain = _run(client, "systematicity", NAME)
        productivity = _run(client, "productivity", NAME)
        metrics = client.get("/metrics").text

    from service.text.attachment import AttachmentChecker

    checker = AttachmentChecker()
    probe = load_probe_set(repo / "probes" / SETS["systematicity"])
    entries = probe.pairs()
    groups = {g: [e.pair for e in entries if e.group == g] for g in sorted({e.group for e in entries})}
    comb = {g: sorted({i for e in entries if e.group == g for i in e.comb[:IMAGES]}) for g in groups}
    no_comb = {e.pair.label: list(e.no_comb[:IMAGES]) for e in entries}
    wanted = {i for ids in comb.values() for i in ids} | {i for ids in no_comb.values() for i in ids}
    training = load_manifest(repo).captioner(DECLARED).training
    held = {ConceptPair(p.kind, p.modifier, p.noun) for p in training.held_out_pairs}
    for model, job, held_out in ((DECLARED, declared, held), (NAME, plain, None)):
        generated = seen[SETS["systematicity"], model]
        assert set(generated) == wanted  # every Test-Comb and Test-no-Comb image, once
        assert all(len(caps) == BEAM for caps in generated.values())
        expected = systematicity_result(  # the job's result carries its intervals too
            groups,
            comb,
            no_comb,
            [e.pair for e in entries],
            held_out,
            generated,
            probe.captions,
            checker.pairs_batch,
            own={e.pair.label: list(e.comb[:IMAGES]) for e in entries},  # a job capped per pair
        )
        expected = with_intervals(expected)
        assert job["result"] == _as_json(expected)  # the numbers are those of the captions it decoded
        for row in job["result"]["pairs"]:
            images = row["images"]
            assert images <= IMAGES  # each pair on its own capped images
            for k, hits in row["hits"].items():
                assert 0 <= hits <= images and row["recall"][k] == (hits / images if images else None)
    # declared: the three pairs held out, the other 21 seen, each mean over its own rows
    result = declared["result"]
    assert result["held_out_known"] is True
    assert {r["pair"] for r in result["pairs"] if r["held_out"]} == {p.label for p in held}
    assert all(r["held_out"] is False for r in result["pairs"] if r["pair"] not in {p.label for p in held})
    assert (result["held_out"]["pairs"], result["seen"]["pairs"], result["all"]["pairs"]) == (3, 21, 24)
    at5 = [r["recall"]["5"] for r in result["pairs"] if r["held_out"] and r["recall"]["5"] is not None]
    assert at5 and result["held_out"]["recall"]["5"] == pytest.approx(sum(at5) / len(at5))
    assert declared["summary"].startswith("held-out pairs (3): ")
    assert f'held_out="true",k="5",model="{DECLARED}"' in metrics
    # not declared: per-pair recall and the mean over every pair, nothing called held out or seen
    result = plain["result"]
    assert result["held_out_known"] is False and result["held_out"] is None and result["seen"] is None
    assert all(r["held_out"] is None for r in result["pairs"]) and result["all"]["pairs"] == 24
    assert plain["summary"].startswith("pairs (24, held-out pairs not declared): ")
    mean = f'compcap_probe_recall_at_k_mean{{held_out="unknown",k="5",model="{NAME}",ranker="none"}}'
    assert mean in metrics
    assert f'held_out="false",k="5",model="{NAME}"' not in metrics
    assert f'held_out="true",k="5",model="{NAME}"' not in metrics
    table = "\n".join(systematicity_kind.lines(result))  # compcap probe's table
    assert "all (held out unknown)" in table and "\nseen " not in table
    # productivity: buckets by instances.json's object counts, scored on the captions it decoded
    prod = load_probe_set(repo / "probes" / SETS["productivity"])
    buckets = {
        by: {name: ids[:IMAGES] for name, ids in prod.buckets(by).items()}
        for by in ("density", "length")
        if prod.info.get(by) is not None
    }
    assert set(buckets) == {"density", "length"}
    decoded = seen[SETS["productivity"], NAME]
    top1 = {i: decoded[i][0] for ids in buckets["density"].values() for i in ids}
    top1.update({i: decoded[i][0] for ids in buckets["length"].values() for i in ids})
    expected = productivity_result(buckets, top1, prod.captions, prod.objects(), prod.cider())
    assert productivity["result"] == _as_json(expected) and productivity["result"]["cider_df"] is True
    for named in productivity["result"]["by"].values():
        for bucket in named.values():
            assert bucket["images"] == 0 or 0.0 <= bucket["coverage"] <= 1.0


def test_mad_ranks_an_imported_captioner_against_a_builtin_one(
    repo: Path, coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run: the imported captioner plainly and with a hook on a word only its tokenizer has, and
    BUTD; every figure of the report is what the study computes from the captions in its state."""
    words = Vocabulary.load(repo / load_manifest(repo).vocabulary.file)
    assert "sofa" not in words.index  # a word of the imported tokenizer, not of the built-in vocabulary
    ban = {"model": NAME, "beam_size": 2, "hooks": [{"name": "ban_words", "params": {"words": ["sofa"]}}]}
    configs = [NAME, "butd", "BAN=" + json.dumps(ban)]
    out = tmp_path / "mad"
    pool = ["--images", "16", "--k", "4", "--iid-data", str(coco), "--iid-images", "6"]
    assert lab(["mad", "--repo", str(repo), "--configs", *configs, *pool, "--out", str(out)]) == 0
    report = json.loads((out / "mad.json").read_text())
    state = json.loads((out / "mad_work" / "state.json").read_text())
    names = [NAME, "butd", "BAN"]
    assert report["names"] == names and report["metrics"] == ["cider_d", "tuple_f1"] and report["k"] == 4
    captions = state["captions"]
    assert set(captions) == set(names) and all(len(captions[n]) == 16 for n in names)
    pool_r = pool_from_state(state["pool"])
    again = run_study(names, captions, pool_r.ids, 4, Referee(pool_r))
    assert report["pairs"] == again["pairs"] and report["p"] == again["p"]
    for metric in report["metrics"]:
        assert report["results"][metric]["ranking"] == again["results"][metric]["ranking"]
        assert sorted(report["results"][metric]["ranking"]) == sorted(names)
        assert report["results"][metric]["residual_ok"]
    assert report["duplicated"] == {n: duplicated_rate(captions[n]) for n in names}
    iid = coco_pool(coco, report["iid"]["ids"])
    assert len(iid) == 6 and report["iid"]["cider_d"] == iid_scores(iid, state["iid_captions"])
    assert NAME in (out / "mad.md").read_text()
    # an option its own tokenizer refuses though the built-in vocabulary has it (the id after its last
    # token, a word id of the built-in vocabulary) is refused before anything is written
    tokens = load_manifest(repo).captioner(NAME).tokens
    assert tokens is not None and tokens.size < len(words) and tokens.size not in words.special_ids
    bad = {"model": NAME, "hooks": [{"name": "ban_words", "params": {"ids": [tokens.size]}}]}
    refused = tmp_path / "refused"
    argv = ["mad", "--repo", str(repo), "--configs", "butd", "BAD=" + json.dumps(bad), *pool]
    assert lab([*argv, "--out", str(refused)]) == 2
    err = capsys.readouterr().err
    assert "configuration BAD" in err and f"id {tokens.size}" in err and not refused.exists()
