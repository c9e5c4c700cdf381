"""The studies' ``compcap-lab`` commands: evaluate, report, substitutivity, productivity, explain-report,
render-reports, counterfactual, seeds, compositional, mad. Light at import (argparse only); each command
imports its study when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from service.cli import blocks
from service.cli.args import (
    ListAction,
    add_renamed,
    existing_dir,
    existing_file,
    held_out_group,
    non_negative_float,
    positive_int,
    writable_dir,
    writable_file,
)
from service.cli.table import Command, CommandTable


def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.gateway_source(
        parser,
        "decode in process from this model repository",
        "decode over HTTP on the gateway at this URL (e.g. http://127.0.0.1:8080); the runs come "
        "from its GET /v1/models, so no --repo",
        required=True,
    )
    blocks.dataset(parser, "the dataset folder (captions.json, images)", required=True)
    blocks.split_kind(parser, "--split", "which split (compcap-lab splits)")
    blocks.held_out_group_choice(parser, "--split systematicity without --split-file")
    parser.add_argument(
        "--split-file",
        type=existing_file,
        default=None,
        help="split.json (default: <data>/splits/<kind>[_<group>]/split.json, where compcap-lab splits "
        "writes)",
    )
    blocks.json_output(parser, "the results JSON")
    parser.add_argument(
        "--set",
        default="test",
        help="set of the split: test, test_no_comb, test_rich, test_base, test_dense, val",
    )
    parser.add_argument(
        "--rerank-beam-size", type=positive_int, default=100, help="beams a re-ranked run re-ranks (B)"
    )
    blocks.rerank_weight(parser, 0.0, "default 0: the ranker alone")
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="evaluate only the set's first N images (default: all)",
    )
    blocks.no_meteor(parser)
    parser.add_argument(
        "--concurrency", type=positive_int, default=None, help="with --url: requests in flight (default 8)"
    )
    parser.add_argument(
        "--checkpoint",
        type=writable_file,
        default=None,
        help="with --url: JSON-lines file of finished images; a rerun skips them (resumes)",
    )
    blocks.api_key(parser, with_url=True)


def _evaluate(args: argparse.Namespace) -> int:
    split_path = Path(args.split_file) if args.split_file else None
    json_out = Path(args.json) if args.json else None
    if args.repo and (args.checkpoint or args.concurrency):
        print("compcap-lab evaluate: --checkpoint and --concurrency need --url", file=sys.stderr)
        return 2
    if split_path is None:
        blocks.require_group(args.split, args.group, "--split")
    from compcap_lab.studies.evaluate import run_evaluate_cli

    return run_evaluate_cli(
        Path(args.repo) if args.repo else None,
        Path(args.data),
        split_path,
        args.split,
        args.group,
        json_out,
        set_name=args.set,
        rerank_beam_size=args.rerank_beam_size,
        rerank_weight=args.rerank_weight,
        limit=args.limit,
        meteor=not args.no_meteor,
        url=args.url,
        concurrency=args.concurrency or 8,
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        api_key=args.api_key,
    )


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    # a folder given is checked here; the default (a Path: argparse converts only string defaults) is
    # checked by _report, since with --reuse the report re-renders from its JSON without the zoo
    blocks.zoo_repository(parser, default=Path("model_zoo"))
    blocks.dataset(parser, "evaluation world (default: <repo>.work/data/eval_<seed>)")
    blocks.value_list(
        parser, "--groups", "GROUP", "held-out pair groups", default=(1, 2, 3, 4), item=held_out_group
    )
    blocks.report_folder(parser)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="re-render from <out>/reproduction.json (intervals recomputed; needs no zoo)",
    )
    parser.add_argument(
        "--rerank-sweep",
        action="store_true",
        help="also BUTR+RR Recall@5 for B = 5..100 and both targets against the re-ranking weight",
    )
    blocks.dataset(
        parser,
        "world whose held-out halves choose BUTR+RR's re-ranking weight (default: <repo>.work/data/train)",
        flag="--dev-data",
    )


def _report(args: argparse.Namespace) -> int:
    from compcap_lab.studies.report import write_report

    repo = str(args.repo)
    work = Path(repo + ".work")
    groups = list(args.groups)
    if args.reuse:
        if not (Path(args.out) / "reproduction.json").is_file():
            print(
                f"compcap-lab report: --reuse: {Path(args.out) / 'reproduction.json'} is not there",
                file=sys.stderr,
            )
            return 2
        from export.probesets import ZOO_EVAL_SEED

        data = Path(args.data) if args.data else work / "data" / f"eval_{ZOO_EVAL_SEED}"
        write_report(Path(repo), data, Path(args.out), groups=groups, reuse=True)
        print(f"wrote {Path(args.out) / 'reproduction.md'}")
        return 0
    if not Path(repo).is_dir():
        print(
            f"compcap-lab report: --repo {repo}: no such folder (without it only --reuse works)",
            file=sys.stderr,
        )
        return 2
    from compcap_lab.pipeline.zoo import EVAL_SEED, ensure_eval_world
    from export.presets import get_preset

    if args.data:
        data = Path(args.data)
    else:  # render and split the evaluation world if this zoo has not met it yet
        build = json.loads((Path(args.repo) / "build_report.json").read_text(encoding="utf-8"))
        data = ensure_eval_world(work, get_preset(build["preset"]), EVAL_SEED, build.get("seed", 0), groups)
    dev = Path(args.dev_data) if args.dev_data else work / "data" / "train"
    write_report(
        Path(args.repo),
        data,
        Path(args.out),
        groups=groups,
        reuse=args.reuse,
        sweep=args.rerank_sweep,
        dev_data=dev if (dev / "splits").is_dir() else None,
    )
    print(f"wrote {Path(args.out) / 'reproduction.md'}")
    return 0


def _substitutivity_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.zoo_repository(parser)
    blocks.dataset(parser, "evaluation world folder (with splits/full)", required=True)
    blocks.dataset(parser, "the captioner's training world folder", required=True, flag="--train")
    add_renamed(parser, "--model", "--captioner", default="butd_full", help="the captioner studied")
    blocks.images(parser, "evaluation images substituted", 2000)
    blocks.report_folder(parser)
    blocks.no_meteor(parser)


def _substitutivity(args: argparse.Namespace) -> int:
    from compcap_lab.studies.substitutivity import run_substitutivity

    result = run_substitutivity(
        Path(args.repo),
        Path(args.data),
        Path(args.train),
        Path(args.out),
        captioner=args.model,
        images=args.images,
        meteor=not args.no_meteor,
    )
    print(f"{result['images']} images substituted; wrote {Path(args.out) / 'substitutivity.md'}")
    return 0


def _productivity_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.dataset(parser, "the training world folder", required=True, flag="--train-data")
    blocks.dataset(parser, "the evaluation world folder", required=True, flag="--eval-data")
    blocks.productivity_measure(parser)
    blocks.zoo_repository(parser, "the zoo: visual encoder, vocabulary and FULL BUTD")
    blocks.report_folder(parser)
    blocks.work_folder(parser, "folder of the retrained captioner (default: <repo>.work/productivity_<by>)")
    blocks.no_meteor(parser)


def _productivity(args: argparse.Namespace) -> int:
    from compcap_lab.studies.productivity import run_productivity

    run_productivity(
        Path(args.train_data),
        Path(args.eval_data),
        args.by,
        Path(args.out),
        work=Path(args.work) if args.work else None,
        zoo=Path(args.repo),
        meteor=not args.no_meteor,
    )
    print(f"wrote {Path(args.out) / f'productivity_{args.by}.md'}")
    return 0


def _explain_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.zoo_repository(parser, "the repository whose captioners are explained")
    blocks.dataset(parser, "SceneWorld folder with scene graphs (default: the repository's evaluation world)")
    blocks.images(parser, "images explained", 500)
    add_renamed(
        parser,
        "--model",
        "--captioners",
        action=ListAction,
        default=None,
        metavar="MODEL",
        help="captioners (default: one per architecture)",
    )
    blocks.value_list(parser, "--methods", "METHOD", "methods (default: all four)")
    parser.add_argument("--n-steps", type=positive_int, default=50, help="integrated gradients' path steps")
    blocks.report_folder(parser)


def _explain(args: argparse.Namespace) -> int:
    from compcap_lab.pipeline.zoo import EVAL_SEED
    from compcap_lab.studies.explanations import run_explain_report
    from service.explain.service import METHODS

    data = Path(args.data) if args.data else Path(args.repo + ".work") / "data" / f"eval_{EVAL_SEED}"
    report = run_explain_report(
        Path(args.repo),
        data,
        Path(args.out),
        images=args.images,
        captioners=args.model or None,
        methods=args.methods or METHODS,
        n_steps=args.n_steps,
    )
    print(f"{report['images']} images explained; wrote {Path(args.out) / 'explanations.md'}")
    return 0


def _mad_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser, "model repository whose captioners are compared")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=None,
        help="configurations: NAME (a captioner), NAME=MODEL?beam_size=100&rerank=true or NAME={json} "
        "(default: one per architecture, BUTR+RR, FULL — what the repository has)",
    )
    pool = parser.add_argument_group("pool R (one of)")
    pool.add_argument("--world-seed", type=int, default=None, help="SceneWorld seed (default 20261123)")
    blocks.images(pool, "SceneWorld images (default 5000)")
    blocks.dataset(pool, "a COCO-format folder (captions.json) as the pool")
    blocks.dataset(pool, "a folder of images (no references: --no-referee)", flag="--image-dir")
    parser.add_argument(
        "--k", type=positive_int, default=None, help="images per pairwise set D_ij (default 70)"
    )
    blocks.report_folder(parser, "mad.md, mad.json, figures; work under <out>/mad_work")
    parser.add_argument(
        "--state", type=writable_file, default=None, help="state file (default <out>/mad_work/state.json)"
    )
    parser.add_argument(
        "--add", default=None, help="add one configuration to the state's study (Algorithm 2)"
    )
    blocks.dataset(
        parser,
        "i.i.d. test set for the conventional CIDEr-D ranking (its splits/full test set when it has "
        "one; default: <repo>.work/data/eval_<seed>, else <repo>.work/data/test)",
        flag="--iid-data",
    )
    parser.add_argument(
        "--iid-images", type=positive_int, default=1000, help="images of the i.i.d. test set scored"
    )
    parser.add_argument("--no-referee", action="store_true", help="stop after selection (no references)")


def _mad(args: argparse.Namespace) -> int:
    from compcap_lab.studies.mad.report import summary_table
    from compcap_lab.studies.mad.study import MadError, run_mad

    given = sys.argv[2:] if sys.argv[1:2] == ["mad"] else []  # the command line, for the report to show
    try:
        report = run_mad(
            Path(args.repo),
            Path(args.out),
            configs=args.configs,
            world_seed=args.world_seed,
            images=args.images,
            data=Path(args.data) if args.data else None,
            image_dir=Path(args.image_dir) if args.image_dir else None,
            k=args.k,
            state_path=Path(args.state) if args.state else None,
            add=args.add,
            iid_data=Path(args.iid_data) if args.iid_data else None,
            iid_images=args.iid_images,
            referee=not args.no_referee,
            command=" ".join(["compcap-lab mad", *given]),
        )
    except MadError as exc:
        print(f"compcap-lab mad: {exc}", file=sys.stderr)
        return 2
    if report["referee"]:
        print(summary_table(report))
    print(f"wrote {Path(args.out) / 'mad.md'}")
    return 0


def _render_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=existing_dir, default="reports", help="folder of the reports (searched recursively)"
    )


def _render(args: argparse.Namespace) -> int:
    """Re-render every study's Markdown from its committed JSON (no model, no data): explanations,
    substitutivity, productivity and MAD reports, wherever they lie under ``--out``."""
    from compcap_lab.studies.rerender import rerender

    for path in rerender(Path(args.out)):
        print(f"wrote {path}")
    return 0


def _counterfactual_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.zoo_repository(parser)
    blocks.value_list(
        parser,
        "--runs",
        "RUN",
        "captioner or captioner+ranker (re-ranked), e.g. --runs butr butr+butr butd "
        "(default: the repository's default captioner)",
    )
    blocks.beam_size(parser, "beam size (top-5 kept)", 5)
    blocks.images(parser, "at most N minimal pairs per pair (default: all)")
    blocks.report_folder(parser)


def _counterfactual(args: argparse.Namespace) -> int:
    from compcap_lab.studies.counterfactual_study import run_counterfactual
    from service.manifest import load_manifest

    runs = args.runs or [load_manifest(Path(args.repo)).default_captioner]
    try:
        report = run_counterfactual(
            Path(args.repo), Path(args.out), runs, beam_size=args.beam_size, images=args.images
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"compcap-lab counterfactual: {exc}", file=sys.stderr)
        return 2
    for name, r in report["runs"].items():
        held, seen = r["held_out"]["recall"]["1"], r["seen"]["recall"]["1"]
        print(f"{name}: hit@1 held-out {held:.3f}, seen {seen:.3f} over {r['minimal_pairs']} minimal pairs")
    print(f"wrote {Path(args.out) / 'counterfactual.md'}")
    return 0


def _seeds_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.zoo_repository(parser)
    blocks.value_list(
        parser,
        "--seeds",
        "SEED",
        "training seeds besides the zoo's own (its models are the first seed)",
        default=(1, 2),
        item=positive_int,
    )
    parser.add_argument("--group", type=held_out_group, default=1, help="the held-out group retrained")
    blocks.dataset(parser, "evaluation world (default: the zoo's, <repo>.work/data/eval_<seed>)")
    blocks.report_folder(
        parser,
        "folder of the reproduction report (its reproduction.json gives the zoo's seed and λ); "
        "seeds.{md,json,png} are written there",
    )


def _seeds(args: argparse.Namespace) -> int:
    from compcap_lab.studies.seeds import run_seeds

    out = Path(args.out)
    if not (out / "reproduction.json").is_file():
        missing = out / "reproduction.json"
        print(f"compcap-lab seeds: {missing} is missing: run compcap-lab report first", file=sys.stderr)
        return 2
    report = run_seeds(Path(args.repo), list(args.seeds), out, group=args.group, data=args.data)
    for name, test in report["pooled"].items():
        d = test["difference"]
        print(
            f"{name}: {100 * d['estimate']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] points of "
            f"Recall@5, p = {test['p_value']:.3g} (pooled over {len(report['per_seed'])} seeds)"
        )
    print(f"wrote {out / 'seeds.md'}")
    return 0


def _compositional_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.zoo_repository(parser)
    parser.add_argument(
        "--out",
        type=writable_dir,
        default=None,
        help="the new repository: the zoo's models plus the compositional rankers (default: <repo>.comp)",
    )
    blocks.value_list(
        parser,
        "--groups",
        "GROUP",
        "held-out pair groups, one ranker comp_g<group> each (default: every group of the zoo)",
        item=held_out_group,
    )
    blocks.value_list(
        parser,
        "--seeds",
        "SEED",
        "more training seeds of --seeds-group's ranker, comp_g<group>_seed<N> (default: none)",
        item=positive_int,
    )
    parser.add_argument(
        "--seeds-group", type=held_out_group, default=1, help="the held-out group trained on --seeds"
    )
    parser.add_argument(
        "--weight", type=non_negative_float, default=1.0, help="weight of the counterfactual hinge terms"
    )
    parser.add_argument(
        "--image-negatives",
        type=positive_int,
        default=3,
        help="counterfactual images rendered per training image, at most",
    )
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="then evaluate them as the reproduction's control rows (BUTD's 100 beams re-ranked, paired "
        "tests against BUTD+VSE++ and BUTR+RR, the beam ceiling, the targets) on the zoo's evaluation "
        "world; writes compositional.{json,md,png} into --report",
    )
    parser.add_argument(
        "--report", type=writable_dir, default="reports", help="with --evaluate: folder of the report"
    )
    blocks.rerank_weight(
        parser,
        None,
        "with --evaluate; default: the reproduction's, rerank.weight of reproduction.json in --report or the "
        "folder above it",
    )
    blocks.no_meteor(parser)


def _compositional(args: argparse.Namespace) -> int:
    from compcap_lab.pipeline.compositional_rankers import (
        Options,
        default_out,
        evaluate_rankers,
        run_compositional,
    )
    from compcap_lab.studies.compositional import reproduction_weight

    zoo = Path(args.repo)
    out = Path(args.out) if args.out else default_out(zoo)
    groups = list(args.groups) if args.groups else None
    options = Options(weight=args.weight, per_image=args.image_negatives)
    weight = (args.rerank_weight, "--rerank-weight") if args.rerank_weight is not None else None
    if args.evaluate and weight is None:
        weight = reproduction_weight(Path(args.report))
        if weight is None:
            print(
                f"compcap-lab compositional: no reproduction.json with rerank.weight in {args.report} or the "
                "folder above it: pass --rerank-weight (the reproduction's λ)",
                file=sys.stderr,
            )
            return 2
    try:
        report = run_compositional(zoo, out, groups, list(args.seeds or []), args.seeds_group, options)
    except (FileNotFoundError, ValueError) as exc:
        print(f"compcap-lab compositional: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}: rankers {', '.join(report['ranker_seeds'])} in {report['seconds']} s")
    if args.evaluate and weight is not None:
        found = evaluate_rankers(
            out,
            zoo,
            report["groups"],
            Path(args.report),
            weight[0],
            meteor=not args.no_meteor,
            seeds_group=args.seeds_group,
            weight_source=weight[1],
        )
        for label, row in found["held_out"].items():
            recall = "-" if row["recall_at_5"] is None else f"{100 * row['recall_at_5']['estimate']:.1f}"
            print(f"{label}: held-out Recall@5 {recall}")
        for target in found["targets"]:
            print(f"{target['what']}: {target['verdict']}")
        print(f"wrote {Path(args.report) / 'compositional.md'} (λ = {weight[0]:g} from {weight[1]})")
    return 0


COMMANDS: CommandTable = {
    "evaluate": Command(
        "evaluate every captioner of a repository on a split", _evaluate_arguments, _evaluate
    ),
    "report": Command("evaluate the zoo and write reports/reproduction.md", _report_arguments, _report),
    "substitutivity": Command(
        "substitutivity test (Pantazopoulos et al., 2022): O vs S captions under synonym substitution",
        _substitutivity_arguments,
        _substitutivity,
    ),
    "productivity": Command(
        "productivity test (Pantazopoulos et al., 2022): BUTD trained without the long/dense tail",
        _productivity_arguments,
        _productivity,
    ),
    "explain-report": Command(
        "grounding study (Cornia et al., 2022): GroundingScore(δ), pointing game, NW, "
        "coverage per captioner × method",
        _explain_arguments,
        _explain,
    ),
    "render-reports": Command(
        "re-render the studies' Markdown reports from their JSON (no model or data needed)",
        _render_arguments,
        _render,
    ),
    "counterfactual": Command(
        "counterfactual minimal pairs: held-out vs seen hit rates and miss classes, with intervals",
        _counterfactual_arguments,
        _counterfactual,
    ),
    "seeds": Command(
        "one group's BUTD, BUTR, VSE++ on more training seeds; the control rows' paired tests",
        _seeds_arguments,
        _seeds,
    ),
    "compositional": Command(
        "compositional rankers: VSE++ (Faghri et al., 2018) trained with SceneWorld's counterfactual "
        "hard negatives, one per held-out group, served beside a copy of the zoo",
        _compositional_arguments,
        _compositional,
    ),
    "mad": Command(
        "maximum-discrepancy comparison (Wan et al., 2022): NGSM-selected pairwise sets, "
        "dominance/Perron ranking",
        _mad_arguments,
        _mad,
    ),
}
