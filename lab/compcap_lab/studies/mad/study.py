"""The maximum-discrepancy (MAD) comparison of captioning configurations (Wan et al., 2022;
``compcap-lab mad``).

1. Pool R (``compcap_lab.studies.mad.pool``): a SceneWorld world of its own seed, a COCO-format folder, or a
   folder of images; every configuration captions all of it (best caption per image, resumable).
2. Selection (Eq. 6): for every pair (i, j), NGSM S (Eqs. 1–4, ``service.compare.ngsm``) of their captions
   on every image; D_ij = the k images of smallest S (``discrepancy_order``: S, then the mean NGSM_n, then
   image id). D_ij at a smaller k is a prefix of the k-ordering.
3. Referee, on the selected images only: CIDEr-D against the pool's references (document frequencies from
   all the pool's references) and, where the pool has scene graphs, the scene-graph tuple F1
   (``service.evaluation.tuples``, a SPICE analogue). p^e[i, j] = mean of metric e of model i's captions
   on D_ij; both metrics are per image, so p at every k comes from the same per-image scores.
4. Ranking (Eq. 7): F^e = ``dominance_matrix(p^e)``, q^e its Perron vector, checked by ``perron_check``.
5. Stability (Fig. 10): SRCC between q at k = 10, 15, ... and q at the largest k.
6. Duplicated-word captions per configuration on the whole pool (Fig. 12), and the conventional ranking:
   CIDEr-D on an i.i.d. test set, with Spearman's ρ against each MAD ranking.
7. Algorithm 2 (``--add``): the state file keeps the captions, selections and p matrices; a new
   configuration captions the pool, only its m pairs are selected and refereed, and p is extended with
   ``extend_scores`` at every k.
8. Ties at S = 0 and the ranking's sensitivity to the tie-break: ``compcap_lab.studies.mad.ties``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from compcap_lab.studies.mad.pool import (
    CHUNK,
    MadError,
    Pool,
    caption_pool,
    check_same_pool,
    coco_pool,
    iid_pool,
    iid_scores,
    image_dir_pool,
    parse_configurations,
    pool_from_state,
    sceneworld_pool,
)
from compcap_lab.studies.mad.report import examples, findings
from compcap_lab.studies.mad.scoring import FLOOR, Referee, nan_none, pair_means, pair_profiles
from compcap_lab.studies.mad.ties import tie_break_study
from service.compare.configs import Configuration
from service.compare.ngsm import discrepancy_order
from service.compare.ranking import (
    dominance_matrix,
    extend_scores,
    perron_check,
    perron_vector,
    rank_stability,
    ranking,
    spearman,
)
from service.compare.repetition import duplicated_rate

STATE_FORMAT = "compcap.mad-state/1"
WORLD_SEED = 20261123  # not a training (0), test (7919) or evaluation (20270313) world seed
RESIDUAL_MAX = 1e-9


def k_grid(k: int) -> list[int]:
    """10, 15, ... up to ``k``, and ``k`` itself."""
    return sorted({*range(10, k + 1, 5), k})


def select(a: Sequence[str], b: Sequence[str], keys: Sequence[int], k: int) -> dict[str, list[Any]]:
    """D_ab (Eq. 6): the ``k`` most discrepant image indices, their S and tie-break values."""
    profiles = pair_profiles(a, b)
    top = discrepancy_order(profiles, keys)[:k]
    return {
        "indices": top,
        "similarity": [profiles[i][0] for i in top],
        "tie": [profiles[i][1] for i in top],
    }


def derive(core: dict[str, Any]) -> dict[str, Any]:
    """``results``: per metric, F and q at the largest k, the Perron check, the ranking and SRCC vs k."""
    names, k = core["names"], core["k"]
    results: dict[str, Any] = {}
    for metric, by_k in core["p"].items():
        p = np.asarray(by_k[str(k)])
        F = dominance_matrix(p, FLOOR)
        q, lam = perron_vector(F)
        check = perron_check(F)
        stability = rank_stability({int(kk): np.asarray(v) for kk, v in by_k.items()}, FLOOR)
        results[metric] = {
            "q": dict(zip(names, q.tolist(), strict=True)),
            "ranking": ranking(q, names),
            "lambda": lam,
            "F": F.tolist(),
            "perron_check": check,
            "residual_ok": check["residual"] <= RESIDUAL_MAX,
            "stability": {str(kk): nan_none(v) for kk, v in stability.items()},
        }
    core["results"] = results
    return core


def run_study(
    names: Sequence[str], captions: dict[str, list[str]], keys: Sequence[int], k: int, referee: Referee | None
) -> dict[str, Any]:
    """Algorithm 1 on given captions (no engine): selections for every pair, p at every k per metric,
    and ``derive``'s results. ``referee`` None: selection only."""
    if k < 1 or k > len(keys):
        raise MadError(f"k = {k} must be in [1, pool size = {len(keys)}]")
    ks = k_grid(k)
    pairs = [
        {"a": a, "b": b, **select(captions[a], captions[b], keys, k)}
        for n, a in enumerate(names)
        for b in names[n + 1 :]
    ]
    core: dict[str, Any] = {"names": list(names), "k": k, "ks": ks, "pairs": pairs, "p": {}, "results": {}}
    if referee is None:
        return core
    m = len(names)
    p = {e: {kk: np.zeros((m, m)) for kk in ks} for e in referee.metrics}
    for pair in pairs:
        i, j = names.index(pair["a"]), names.index(pair["b"])
        for metric, by_k in pair_means(referee, captions, pair, ks).items():
            for kk, (pab, pba) in by_k.items():
                p[metric][kk][i, j], p[metric][kk][j, i] = pab, pba
    core["p"] = {e: {str(kk): v.tolist() for kk, v in by_k.items()} for e, by_k in p.items()}
    return derive(core)


def add_configuration(
    core: dict[str, Any],
    name: str,
    captions: dict[str, list[str]],
    keys: Sequence[int],
    referee: Referee | None,
) -> dict[str, Any]:
    """Algorithm 2: ``name`` (its captions in ``captions``, with every old configuration's) joins; only
    D_{i,new} are selected and refereed, p extended by ``extend_scores`` at every k."""
    if name in core["names"]:
        raise MadError(f"configuration {name!r} is already in the study")
    names, k, ks = list(core["names"]), core["k"], core["ks"]
    new_pairs = [{"a": a, "b": name, **select(captions[a], captions[name], keys, k)} for a in names]
    out = {**core, "names": [*names, name], "pairs": [*core["pairs"], *new_pairs]}
    if referee is None:
        return out
    means = [pair_means(referee, captions, pair, ks) for pair in new_pairs]
    out["p"] = {
        e: {
            str(kk): extend_scores(
                np.asarray(by_k[str(kk)]),
                [mm[e][kk][1] for mm in means],  # p[new, i]: the new model on D_{i,new}
                [mm[e][kk][0] for mm in means],  # p[i, new]: model i on D_{i,new}
            ).tolist()
            for kk in ks
        }
        for e, by_k in core["p"].items()
    }
    return derive(out)


# ------------------------------------------------------------------------------------------ the command
def conventional(core: dict[str, Any], iid: dict[str, Any] | None) -> None:
    """``iid``'s ranking by CIDEr-D and Spearman's ρ against each MAD ranking (in place)."""
    if iid is None:
        return
    names = core["names"]
    cider = [iid["cider_d"][n] for n in names]
    iid["ranking"] = ranking(np.asarray(cider), names)
    iid["spearman"] = {
        e: nan_none(spearman([r["q"][n] for n in names], cider)) for e, r in core["results"].items()
    }


def _load_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MadError(f"--state {path}: cannot read it ({exc})") from None
    if state.get("format") != STATE_FORMAT:
        raise MadError(f"--state {path} is not a MAD state file (format {state.get('format')!r})")
    return dict(state)


def run_mad(
    repo: Path,
    out: Path,
    configs: Sequence[str] | None = None,
    world_seed: int | None = None,
    images: int | None = None,
    data: Path | None = None,
    image_dir: Path | None = None,
    k: int | None = None,
    state_path: Path | None = None,
    add: str | None = None,
    iid_data: Path | None = None,
    iid_images: int = 1000,
    referee: bool = True,
    chunk: int = CHUNK,
    command: str = "compcap-lab mad",
) -> dict[str, Any]:
    """The whole study (module docstring); every input is checked before any captioning. Returns the
    report written to ``<out>/mad.json``."""
    t0 = time.perf_counter()
    workdir = Path(out) / "mad_work"
    state_path = state_path or workdir / "state.json"
    spec = {"data": data, "image_dir": image_dir, "world_seed": world_seed, "images": images}
    if sum(x is not None for x in (data, image_dir, world_seed if images is None else images)) > 1:
        raise MadError("give one pool: --world-seed/--images, --data or --image-dir")
    if iid_images < 1:
        raise MadError(f"--iid-images must be >= 1, got {iid_images}")
    old: dict[str, Any] | None = None
    if add is not None:
        if configs:
            raise MadError("--add takes the other configurations from the state; drop --configs")
        if not state_path.is_file():
            raise MadError(f"--add needs the state of an earlier run; {state_path} does not exist")
        old = _load_state(state_path)
        if k is not None and k != old["k"]:
            raise MadError(f"--k {k} differs from the state's k = {old['k']}")
        if add.partition("=")[0].strip() in old["names"]:
            raise MadError(
                f"--add {add}: a configuration named {add.partition('=')[0]!r} is already in the state"
            )
        if any(v is not None for v in spec.values()):
            check_same_pool(old["pool"]["identity"], spec)
        if iid_data is not None and str(Path(iid_data).resolve()) != (old.get("iid") or {}).get("data"):
            raise MadError(f"--iid-data {iid_data} is not the state's i.i.d. set; drop it with --add")
        known = [Configuration(c["name"], c["options"]) for c in old["configurations"]]
        new = parse_configurations([add], repo, known)
        all_configs, todo = [*known, *new], new
        pool = pool_from_state(old["pool"])
        k = old["k"]
        referee = old["referee"]
    else:
        all_configs = todo = parse_configurations(configs, repo)
        k = 70 if k is None else k
        if data is not None:
            pool = coco_pool(data)
        elif image_dir is not None:
            pool = image_dir_pool(image_dir)
        else:
            world_seed = WORLD_SEED if world_seed is None else world_seed
            images = 5000 if images is None else images
            if images < 2:
                raise MadError(f"--images must be >= 2, got {images}")
            pool = Pool("sceneworld", Path(), list(range(images)), [""] * images, seed=world_seed)
    if not 1 <= k <= len(pool):
        raise MadError(f"--k {k} must be in [1, pool size = {len(pool)}]")
    if referee and pool.kind == "images":
        raise MadError(f"the pool {pool.root} has no references to referee against; add --no-referee")
    iid = None
    if referee:
        if old is not None:
            iid = coco_pool(Path(old["iid"]["data"]), old["iid"]["ids"]) if old.get("iid") else None
        else:
            iid = iid_pool(repo, iid_data, iid_images)
        if iid is None:
            print(
                "compcap-lab mad: no i.i.d. test set found (--iid-data); skipping that ranking",
                file=sys.stderr,
            )

    from service.manifest import load_manifest

    manifest = load_manifest(repo)
    size = (manifest.image.height, manifest.image.width)
    if pool.kind == "sceneworld" and old is None:
        assert world_seed is not None and images is not None
        t_pool = time.perf_counter()
        pool = sceneworld_pool(workdir, world_seed, images, manifest.image.width)
        pool_seconds = time.perf_counter() - t_pool
    else:
        pool_seconds = 0.0
    captions, seconds, iid_captions, iid_seconds = asyncio.run(
        _caption_all(repo, pool, todo, iid, workdir, size, chunk)
    )
    ref = Referee(pool) if referee else None
    if old is not None:
        captions = {**old["captions"], **captions}
        core = add_configuration(old, todo[0].name, captions, pool.ids, ref)
        seconds = {**old["timing"]["pool_seconds"], **seconds}
        iid_seconds = {**old["timing"]["iid_seconds"], **iid_seconds}
        if old.get("iid"):
            iid_captions = {**old["iid_captions"], **iid_captions}
    else:
        core = run_study([c.name for c in all_configs], captions, pool.ids, k, ref)
    t_ties = time.perf_counter()
    ties = tie_break_study(core, captions, pool.ids, ref)
    ties_seconds = time.perf_counter() - t_ties
    total = round(time.perf_counter() - t0, 2)
    earlier = [] if old is None else list(old["timing"].get("runs_seconds", [old["timing"]["total_seconds"]]))
    report: dict[str, Any] = {
        "format": STATE_FORMAT,
        "command": command,
        "commands": [*([] if old is None else old.get("commands", [old["command"]])), command],
        "repo": str(repo),
        "configurations": [c.to_json() for c in all_configs],
        "pool": {
            "root": str(pool.root.resolve()),
            "kind": pool.kind,
            "seed": pool.seed,
            "identity": pool.identity(),
        },
        "referee": referee,
        "metrics": list(core["p"]),
        **{key: core[key] for key in ("names", "k", "ks", "pairs", "p", "results")},
        "duplicated": {n: duplicated_rate(captions[n]) for n in core["names"]},
        "timing": {
            "pool_seconds": seconds,
            "iid_seconds": iid_seconds,
            "pool_write_seconds": round(pool_seconds, 2),
            "tie_break_seconds": round(ties_seconds, 2),
            "total_seconds": total,
            "runs_seconds": [*earlier, total],  # every run of this study, the first run first
            "added": todo[0].name if old else None,
        },
        "examples": examples(core, pool.ids, pool.file_names, captions),
        "discrepant_sets": {
            f"{p['a']} vs {p['b']}": [pool.file_names[i] for i in p["indices"]] for p in core["pairs"]
        },
        "tie_break": ties,
    }
    report["iid"] = None
    if iid is not None and referee:
        report["iid"] = {"data": str(iid.root.resolve()), "images": len(iid), "ids": iid.ids}
        report["iid"]["cider_d"] = iid_scores(iid, iid_captions)
        conventional(report, report["iid"])
    report["findings"] = findings(report) if referee else {}
    _write_outputs(report, Path(out), state_path, captions, iid_captions)
    return report


async def _caption_all(
    repo: Path,
    pool: Pool,
    configs: Sequence[Configuration],
    iid: Pool | None,
    workdir: Path,
    size: tuple[int, int],
    chunk: int,
) -> tuple[dict[str, list[str]], dict[str, float], dict[str, list[str]], dict[str, float]]:
    from export.packaging.decoding import open_engine
    from service.engine.settings import MAX_BEAM_SIZE

    engine = await open_engine(repo, max_beam_size=MAX_BEAM_SIZE)
    try:
        captions, seconds = await caption_pool(engine, pool, configs, workdir / "captions", size, chunk)
        iid_captions: dict[str, list[str]] = {}
        iid_seconds: dict[str, float] = {}
        if iid is not None:
            iid_captions, iid_seconds = await caption_pool(
                engine, iid, configs, workdir / "iid_captions", size, chunk, desc="i.i.d."
            )
    finally:
        await engine.close()
    return captions, seconds, iid_captions, iid_seconds


def _write_outputs(
    report: dict[str, Any],
    out: Path,
    state_path: Path,
    captions: dict[str, list[str]],
    iid_captions: dict[str, list[str]],
) -> None:
    """mad.json, mad.md, the figures and the state, each to a temporary name then renamed."""
    from compcap_lab.studies.mad.report import render_discrepant, render_markdown, render_stability

    out.mkdir(parents=True, exist_ok=True)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    staged = {
        out / "mad.json": lambda p: p.write_text(json.dumps(report, indent=1), encoding="utf-8"),
        out / "mad.md": lambda p: p.write_text(render_markdown(report), encoding="utf-8"),
        out / "mad_discrepant.png": lambda p: render_discrepant(report, p),
        state_path: lambda p: p.write_text(
            json.dumps({**report, "captions": captions, "iid_captions": iid_captions}), encoding="utf-8"
        ),
    }
    if report["referee"]:
        staged[out / "mad_stability.png"] = lambda p: render_stability(report, p)
    temporary = {path: path.with_name(f".{path.name}.tmp") for path in staged}
    for path, write in staged.items():
        write(temporary[path])
    for path, tmp in temporary.items():  # renamed only once every file is written
        os.replace(tmp, path)
