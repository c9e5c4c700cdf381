"""Seed 003's MAD study (``compcap mad``): selection, refereeing and ranking on constructed captions,
Algorithm 2 (``--add``) against all at once, the resumable caption checkpoints, the CLI's input errors,
and one end-to-end run on the tiny repository."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from export.studies.mad import Referee, add_configuration, k_grid, run_mad, run_study
from export.studies.mad_pool import MadError, Pool, caption_pool, image_dir_pool
from export.world.dataset import generate_graphs
from service.cli import main
from service.compare.configs import Configuration
from service.compare.ngsm import ngsm_profile

N, K = 40, 12
GARBAGE = "a cat cat cat cat on a boat"


def _pool(n: int = N) -> Pool:
    graphs = generate_graphs(n, seed=123)
    refs = [[c["text"] for c in g["captions"]] for g in graphs]
    return Pool("sceneworld", Path("."), list(range(n)), [""] * n, refs, graphs, seed=123)


def _captions(pool: Pool) -> dict[str, list[str]]:
    """GOOD says a reference; HALF says one on even images, garbage on odd; BAD always garbage; ALT
    another reference on images 0 mod 3, garbage elsewhere."""
    refs = pool.references
    assert refs is not None
    return {
        "GOOD": [r[0] for r in refs],
        "HALF": [r[1] if i % 2 == 0 else GARBAGE for i, r in enumerate(refs)],
        "BAD": [GARBAGE for _ in refs],
        "ALT": [r[2] if i % 3 == 0 else "two dogs" for i, r in enumerate(refs)],
    }


def test_selection_is_the_k_least_similar_and_the_wrong_model_ranks_last() -> None:
    pool = _pool()
    caps = _captions(pool)
    names = ["BAD", "GOOD", "HALF"]
    core = run_study(names, caps, pool.ids, K, Referee(pool))
    assert core["ks"] == [10, K] and len(core["pairs"]) == 3
    for pair in core["pairs"]:
        s = [ngsm_profile(x, y)[0] for x, y in zip(caps[pair["a"]], caps[pair["b"]], strict=True)]
        assert len(pair["indices"]) == K and pair["similarity"] == [s[i] for i in pair["indices"]]
        assert max(pair["similarity"]) <= min(v for i, v in enumerate(s) if i not in pair["indices"])
    assert set(core["results"]) == {"cider_d", "tuple_f1"}
    for metric, r in core["results"].items():
        assert r["ranking"] == ["GOOD", "HALF", "BAD"], metric
        assert r["perron_check"]["residual"] <= 1e-9 and r["residual_ok"]
        assert abs(sum(r["q"].values()) - 1) < 1e-12
        p = np.asarray(core["p"][metric][str(K)])
        i, j = names.index("GOOD"), names.index("BAD")
        assert p[i, j] > p[j, i]  # GOOD beats BAD on their own discrepant set
        assert set(r["stability"]) == {"10", str(K)} and r["stability"][str(K)] == pytest.approx(1.0)


def _by_pair(core: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(p["a"], p["b"]): p for p in core["pairs"]}


def test_add_equals_all_at_once() -> None:
    pool = _pool()
    caps = _captions(pool)
    referee = Referee(pool)
    once = run_study(["GOOD", "HALF", "BAD", "ALT"], caps, pool.ids, K, referee)
    added = add_configuration(
        run_study(["GOOD", "HALF", "BAD"], caps, pool.ids, K, referee), "ALT", caps, pool.ids, referee
    )
    assert added["names"] == once["names"] and _by_pair(added) == _by_pair(once)
    for metric in once["p"]:
        for k in once["ks"]:
            assert np.array_equal(
                np.asarray(added["p"][metric][str(k)]), np.asarray(once["p"][metric][str(k)])
            )
        assert added["results"][metric]["ranking"] == once["results"][metric]["ranking"]
        assert added["results"][metric]["q"] == pytest.approx(once["results"][metric]["q"], abs=1e-12)
    with pytest.raises(MadError, match="already"):
        add_configuration(once, "ALT", caps, pool.ids, referee)


def test_k_bounds_references_and_selection_only() -> None:
    pool = _pool(8)
    caps = _captions(pool)
    with pytest.raises(MadError, match="pool size = 8"):
        run_study(["GOOD", "BAD"], caps, pool.ids, 9, Referee(pool))
    bare = Pool("images", Path("."), pool.ids, pool.file_names)
    with pytest.raises(MadError, match="no references"):
        Referee(bare)
    core = run_study(["GOOD", "BAD"], caps, pool.ids, 8, None)  # --no-referee: selection only
    assert core["p"] == {} and core["results"] == {} and len(core["pairs"][0]["indices"]) == 8
    assert k_grid(70)[:2] == [10, 15] and k_grid(70)[-1] == 70 and k_grid(4) == [4] and k_grid(12) == [10, 12]


class FakeEngine:
    """Captions that depend only on the options and the pixels (a hash picks the words)."""

    WORDS = ("a", "dog", "cat", "red", "blue", "on", "the", "grass", "next", "to", "car", "big")

    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, **options: Any) -> dict[str, Any]:
        return dict(options)

    async def caption_many(self, images: np.ndarray, params: Any, progress: Any = None) -> list[list[Any]]:
        self.calls += 1
        key = json.dumps(params, sort_keys=True).encode()
        out = []
        for image in images:
            digest = hashlib.sha256(key + image.tobytes()).digest()
            text = " ".join(self.WORDS[b % len(self.WORDS)] for b in digest[: 3 + digest[0] % 5])
            out.append([SimpleNamespace(text=text)])
        if progress is not None:
            progress(len(images))
        return out

    async def close(self) -> None:
        pass


def _image_dir(folder: Path, n: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def test_checkpoints_resume_and_refuse_another_header(tmp_path: Path) -> None:
    pool = image_dir_pool(_image_dir(tmp_path / "imgs", 10))
    configs = [Configuration("A", {"model": "butd"}), Configuration("B", {"model": "butr"})]
    engine = FakeEngine()
    folder = tmp_path / "captions"

    def run(configs: list[Configuration], chunk: int = 4) -> tuple[dict[str, list[str]], dict[str, float]]:
        return asyncio.run(caption_pool(engine, pool, configs, folder, (16, 16), chunk=chunk))  # type: ignore[arg-type]

    first, _ = run(configs)
    assert engine.calls == 6 and [len(v) for v in first.values()] == [10, 10]
    again, seconds = run(configs)
    assert engine.calls == 6 and again == first and set(seconds) == {"A", "B"}
    path = folder / "A.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:-1], lines[-1][:20]]) + "\n")  # a torn last chunk
    resumed, _ = run(configs)
    assert engine.calls == 7 and resumed == first
    other = [Configuration("A", {"model": "butd", "beam_size": 2}), configs[1]]
    with pytest.raises(MadError, match=r"checkpoint .*A\.jsonl"):
        run(other)
    with pytest.raises(MadError, match="checkpoint"):  # another chunk size is another header too
        run(configs, chunk=5)
    assert engine.calls == 7


def test_the_command_adds_a_configuration_as_if_all_ran_at_once(
    tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine()

    async def fake_open(repo: Path, **settings: Any) -> FakeEngine:
        return engine

    monkeypatch.setattr("export.decoding.open_engine", fake_open)
    three = ["A=butd", "B=butr", "C=butd?beam_size=2"]
    common: dict[str, Any] = {"images": 30, "k": 6, "iid_images": 4}
    once = run_mad(tiny_repo, tmp_path / "once", configs=three, **common)
    run_mad(tiny_repo, tmp_path / "inc", configs=three[:2], **common)
    calls = engine.calls
    added = run_mad(tiny_repo, tmp_path / "inc", add=three[2])
    assert engine.calls - calls <= 2  # the new configuration only: pool and i.i.d. set, one chunk each
    assert added["names"] == once["names"] == ["A", "B", "C"] and added["timing"]["added"] == "C"
    assert added["p"] == once["p"] and _by_pair(added) == _by_pair(once)
    for metric in once["results"]:
        assert added["results"][metric]["ranking"] == once["results"][metric]["ranking"]
    assert added["iid"]["cider_d"] == once["iid"]["cider_d"]
    state = tmp_path / "inc" / "mad_work" / "state.json"
    with pytest.raises(MadError, match="already in the state"):
        run_mad(tiny_repo, tmp_path / "inc", add="C=butr")
    with pytest.raises(MadError, match="another pool"):
        run_mad(tiny_repo, tmp_path / "inc", add="D=butr", images=31)
    with pytest.raises(MadError, match="unknown model"):
        run_mad(tiny_repo, tmp_path / "inc", add="D=nosuch")
    assert json.loads(state.read_text())["names"] == ["A", "B", "C"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--configs", "butd"], "two or more"),
        (["--configs", "butd", "butd"], "repeated"),
        (["--configs", "butd", "nosuch"], "unknown model"),
        (["--configs", "butd", "butr", "--images", "5", "--k", "6"], "pool size = 5"),
        (["--configs", "butd", "butr", "--image-dir", "IMGS", "--k", "2"], "no references"),
    ],
)
def test_bad_input_is_a_clean_error_that_writes_nothing(
    tiny_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    _image_dir(tmp_path / "imgs", 3)
    argv = [str(tmp_path / "imgs") if a == "IMGS" else a for a in argv]
    out = tmp_path / "out"
    assert main(["mad", "--repo", str(tiny_repo), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compcap mad: ") and message in err
    assert not out.exists()


def test_end_to_end_on_the_tiny_repository(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    argv = ["mad", "--repo", str(tiny_repo), "--configs", "butd", "butr", "--images", "24", "--k", "4"]
    assert main([*argv, "--iid-images", "6", "--out", str(out)]) == 0
    for name in ("mad.md", "mad.json", "mad_discrepant.png", "mad_stability.png", "mad_work/state.json"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "mad.json").read_text())
    assert (
        report["names"] == ["butd", "butr"]
        and report["k"] == 4
        and report["metrics"] == ["cider_d", "tuple_f1"]
    )
    assert len(report["pairs"]) == 1 and len(report["pairs"][0]["indices"]) == 4
    for metric in report["metrics"]:
        assert report["results"][metric]["residual_ok"] and len(report["p"][metric]["4"]) == 2
    assert set(report["duplicated"]) == {"butd", "butr"} and set(report["timing"]["pool_seconds"]) == {
        "butd",
        "butr",
    }
    assert report["iid"] is None or set(report["iid"]["cider_d"]) == {"butd", "butr"}
    assert 1 <= len(report["examples"]) <= 12
    assert "MAD ranking" in (out / "mad.md").read_text()
