"""Rendering of the MAD study (``compcap_lab.studies.mad.study``): ``mad.md`` (the tables of Wan et al.,
2022, and which of their findings hold here), ``mad_discrepant.png`` (the most discrepant images with every
configuration's caption), ``mad_stability.png`` (SRCC vs k, Fig. 10's shape) and the summary table printed
after a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LABEL = {"cider_d": "CIDEr-D", "tuple_f1": "tuple F1"}
STABLE_SRCC, STABLE_K = 0.9, 46  # Wan et al. (2022), Fig. 10: SRCC > 0.90 for k > 46


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def findings(report: dict[str, Any]) -> dict[str, Any]:
    """Per metric: whether SRCC > 0.9 at every tested k in (46, k) (None: no such k), the smallest k
    from which every SRCC is > 0.9, and whether the MAD ranking differs from the i.i.d. one (ρ < 1;
    None when ρ is undefined: a constant q or constant i.i.d. scores)."""
    out: dict[str, Any] = {}
    iid = report.get("iid")
    for e, r in report["results"].items():
        srcc = {int(k): v for k, v in r["stability"].items()}
        tested = [v for k, v in srcc.items() if STABLE_K < k < report["k"]]
        ks = sorted(srcc)
        rho = None if iid is None else iid["spearman"][e]
        stable_from = next((k for k in ks if all((srcc[x] or 0.0) > STABLE_SRCC for x in ks if x >= k)), None)
        out[e] = {
            "stable_above_46": all((v or 0.0) > STABLE_SRCC for v in tested) if tested else None,
            "stable_from_k": stable_from,
            "differs_from_iid": None if rho is None else rho < 1.0 - 1e-12,
        }
    return out


def examples(
    core: dict[str, Any],
    ids: list[int],
    file_names: list[str],
    captions: dict[str, list[str]],
    limit: int = 12,
) -> list[dict[str, Any]]:
    """Per pair (in order, while fewer than ``limit`` images are chosen), its two most discrepant
    images not already shown for an earlier pair."""
    chosen: list[dict[str, Any]] = []
    seen: set[int] = set()
    for pair in core["pairs"]:
        fresh = [(r, i) for r, i in enumerate(pair["indices"]) if i not in seen][:2]
        for rank, i in fresh[: limit - len(chosen)]:
            seen.add(i)
            chosen.append(
                {
                    "pair": [pair["a"], pair["b"]],
                    "index": i,
                    "id": ids[i],
                    "file_name": file_names[i],
                    "rank": rank + 1,
                    "similarity": pair["similarity"][rank],
                    "captions": {n: captions[n][i] for n in core["names"]},
                }
            )
    return chosen


def _from(k: int | None) -> str:
    return "SRCC > 0.9 at no k" if k is None else f"every SRCC > 0.9 from k = {k}"


def _matrix(title: str, names: list[str], rows: list[list[float]]) -> list[str]:
    lines = [f"{title}", "", "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for name, row in zip(names, rows, strict=True):
        cells = ["·" if a == b else _f(v) for a, b, v in zip([name] * len(names), names, row, strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def tie_statement(report: dict[str, Any]) -> str:
    """One plain sentence: in how many pairs the tie-break, not S, decides D_ij (from ``tie_break``)."""
    ties, k = report["tie_break"], report["k"]
    pairs, n = ties["pairs"], len(ties["pairs"])
    if ties.get("by_tie_break") is None:
        full = sum(p["selected_zero"] == p["k"] for p in pairs)
        return (
            f"In {full} of the {n} pairs every one of the k = {k} images of D_ij has S = 0, so the "
            "documented tie-break (mean NGSM_n, then image id) orders D_ij; whether more than k images "
            "of R tie at S = 0 — i.e. whether the tie-break also decides which images are in D_ij — "
            "cannot be told from `mad.json` (see below)."
        )
    by = ties["by_tie_break"]
    zero = [p["zero"] for p in pairs]
    span = f"{min(zero)}–{max(zero)}" if min(zero) != max(zero) else f"{zero[0]}"
    if by == 0:
        return "S alone decides every D_ij: no pair has more images tied at its k-th S than D_ij takes."
    head = f"**The selection is decided by the tie-break in {by} of the {n} pairs:** "
    if all(p["boundary_s"] == 0.0 for p in pairs if p["by_tie_break"]):
        return head + (
            f"{span} of the {pairs[0]['pool']} images of R have S = 0 per pair (against k = {k}), so D_ij "
            "is the k of them that the tie-break (mean NGSM_n, then image id) puts first, not the k of "
            "smallest S."
        )
    return head + (
        "more images tie at D_ij's k-th S than D_ij takes, so the tie-break (mean NGSM_n, then image id) "
        f"picks which of them are in D_ij (images with S = 0 per pair: {span} of {pairs[0]['pool']})."
    )


def _tie_sections(report: dict[str, Any]) -> list[str]:
    ties, k = report["tie_break"], report["k"]
    lines = [
        "## Ties at S = 0: how much the tie-break decides",
        "",
        "S is a geometric mean, so one order n without a shared n-gram (short captions rarely share a "
        "4-gram) makes S = 0, and many images tie there.",
        "",
        tie_statement(report),
        "",
        "| pair | S = 0 in R | share of R | S = 0 in D_ij | no shared word in D_ij | mean NGSM_n at rank k "
        "| decided by the tie-break | D_ij kept: reverse / random (mean) |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for p in ties["pairs"]:
        overlap = p.get("overlap") or {}
        randoms = [v for label, v in overlap.items() if label.startswith("random:")]
        kept = (
            f"{overlap['reverse']} / {sum(randoms) / len(randoms):.1f}"
            if "reverse" in overlap and randoms
            else "–"
        )
        decided = p.get("by_tie_break")
        lines.append(
            f"| {p['a']} vs {p['b']} | {p.get('zero', '–')} | {_pct(p.get('zero_share'))} | "
            f"{p['selected_zero']} / {p['k']} | {p['shared_nothing']} | {_f(p['boundary_tie'])} | "
            f"{'–' if decided is None else 'yes' if decided else 'no'} | {kept} |"
        )
    lines.append("")
    if ties.get("not_recomputed"):
        return [*lines, f"Not recomputed: {ties['not_recomputed']}", ""]
    if not ties["rankings"]:
        return [*lines, "No referee: the rankings' sensitivity to the tie-break is not measured.", ""]
    labels, metrics = ties["labels"], list(ties["rankings"])
    seeds = ties["seeds"]
    lines += [
        f"Sensitivity of the ranking to the tie-break: every pair's D_ij selected again with S ascending "
        f"as before but another order among equal S — `reverse` (mean NGSM_n descending, then image id) "
        f"and {len(seeds)} seeded random orders (`random:<seed>`, seeds {seeds[0]}–{seeds[-1]}) — then p, F "
        f"and q recomputed at k = {k} with the same referee, and each ranking compared with the reported "
        "one (Spearman's ρ of q; the same top and bottom configuration).",
        "",
        "| tie-break | " + " | ".join(f"ρ ({LABEL[e]}) | ranking ({LABEL[e]})" for e in metrics) + " |",
        "|---|" + "---:|---|" * len(metrics),
    ]
    for label in labels:
        cells = []
        for e in metrics:
            r = ties["rankings"][e][label]
            cells.append(f"{_f(r['spearman'], 2)} | {' > '.join(r['ranking'])}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for e in metrics:
        sm, reported = ties["summary"][e], report["results"][e]["ranking"]
        lines.append(
            f"- {LABEL[e]}: ρ with the reported ranking ({' > '.join(reported)}) is "
            f"{_f(sm['min_spearman'], 2)} at the lowest, median {_f(sm['median_spearman'], 2)}, over "
            f"{sm['alternatives']} alternative tie-breaks; {sm['identical']} give the reported ranking; the "
            f"top configuration changes in {sm['top_changed']}, the bottom one in {sm['bottom_changed']}."
        )
    return [*lines, ""]


def _tie_caveat(report: dict[str, Any], metric: str) -> str:
    """The qualification a verdict on ``metric``'s ranking needs when the tie-break decides D_ij: how
    many pairs it decides and how the ranking fares under the alternative tie-breaks ("" when it
    decides none, or no sensitivity was run)."""
    ties = report.get("tie_break") or {}
    decided, pairs = ties.get("by_tie_break") or 0, len(ties.get("pairs") or [])
    sm = (ties.get("summary") or {}).get(metric)
    tied = [q for q in ties.get("pairs") or [] if q.get("selected_zero") and q["selected_zero"] == q.get("k")]
    if ties.get("by_tie_break") is None and tied:
        return (
            f" Qualified: in {len(tied)} of {pairs} pairs every image of D_ij has S = 0, so the tie-break "
            "orders D_ij (which images the first k are) and may decide which images it holds (not "
            "recorded): the verdict holds for this tie-break, not for the metric as such."
        )
    if not decided or not sm:
        return ""
    return (
        f" Qualified: the tie-break decides D_ij in {decided} of {pairs} pairs, and under "
        f"{sm['alternatives']} alternative tie-breaks {sm['identical']} give this ranking (ρ with it ≥ "
        f"{_f(sm['min_spearman'], 2)}, median {_f(sm['median_spearman'], 2)}): the verdict holds for "
        "this tie-break, not for the metric as such."
    )


def _claims(report: dict[str, Any]) -> list[str]:
    out = []
    for e, f in report["findings"].items():
        r = report["results"][e]
        tested = {k: v for k, v in r["stability"].items() if STABLE_K < int(k) < report["k"]}
        if f["stable_above_46"] is None:
            out.append(
                f"- {LABEL[e]}: stability above k = 46 cannot be checked at k = {report['k']} "
                f"(needs k ≥ 55); {_from(f['stable_from_k'])}."
            )
        else:
            out.append(
                f"- {LABEL[e]}: SRCC > 0.9 for every tested k > 46 "
                f"({', '.join(f'{k}: {_f(v, 2)}' for k, v in tested.items())}) — "
                f"**{'holds' if f['stable_above_46'] else 'does not hold'}**; "
                f"{_from(f['stable_from_k'])}." + _tie_caveat(report, e)
            )
        if report.get("iid") and f["differs_from_iid"] is None:
            out.append(f"- {LABEL[e]}: ρ against the i.i.d. ranking is undefined (a constant score vector).")
        elif f["differs_from_iid"] is not None:
            rho = report["iid"]["spearman"][e]
            out.append(
                f"- {LABEL[e]}: the MAD ranking {'differs from' if f['differs_from_iid'] else 'equals'} "
                f"the i.i.d. CIDEr-D ranking (ρ = {_f(rho, 2)}) — the paper's claim that MAD reorders "
                f"models {'holds' if f['differs_from_iid'] else 'does not hold'} here."
                + _tie_caveat(report, e)
            )
    if report.get("tie_break"):
        summary = report["tie_break"].get("summary") or {}
        robust = "; ".join(
            f"{LABEL[e]} ρ ≥ {_f(sm['min_spearman'], 2)}, top changed in {sm['top_changed']} of "
            f"{sm['alternatives']}, bottom in {sm['bottom_changed']}"
            for e, sm in summary.items()
        )
        out.append(
            f"- {tie_statement(report).replace('**', '')}"
            + (f" Under alternative tie-breaks: {robust}." if robust else "")
        )
    dup = report["duplicated"]
    if dup:
        worst = max(dup, key=lambda n: dup[n]["rate"])
        best = min(dup, key=lambda n: dup[n]["rate"])
        out.append(
            f"- Duplicated captions (a word ≥ 3 times in a row): highest {worst} "
            f"({100 * dup[worst]['rate']:.2f}%, {dup[worst]['classes']} word classes), lowest {best} "
            f"({100 * dup[best]['rate']:.2f}%); the paper's worst model (ORT) had ≥ 6× the others' rate."
        )
    return out


def render_markdown(report: dict[str, Any]) -> str:
    names, pool, timing = report["names"], report["pool"], report["timing"]
    m, k = len(names), report["k"]
    union = len({i for p in report["pairs"] for i in p["indices"]})
    lines = [
        "# MAD: maximum-discrepancy comparison of captioning configurations (Wan et al., 2022)",
        "",
        f"Pool R: {pool['identity']['images']} images, {pool['kind']} (`{pool['root']}`"
        + (f", seed {pool['seed']}" if pool["seed"] is not None else "")
        + f", fingerprint `{pool['identity']['fingerprint']}`). Every configuration captions all of R "
        f"(best caption); for each of the {m * (m - 1) // 2} pairs, D_ij = the k = {k} images of smallest "
        f"NGSM S (Eqs. 1–4, n = 1..4; ties by mean NGSM_n, then image id): {union} distinct images in D. "
        + (
            "The referee scores the selected images only against the pool's references "
            "(CIDEr-D, document frequencies from all of R's references) and, with scene graphs, the "
            "scene-graph tuple F1 (a SPICE analogue on the exact graph) — standing in for the human "
            "annotation of Wan et al. (2022). p[i, j] = mean score of configuration i on D_ij; "
            "F[i, j] = p[i, j] / p[j, i] (scores floored at 1e-3); q = Perron vector of F (Eq. 7). "
            if report["referee"]
            else "No referee (--no-referee): the study stops after selection. "
        )
        + "Regenerate: "
        + ", then ".join(f"`{c}`" for c in report.get("commands") or [report["command"]])
        + ".",
        "",
        "## Configurations and time",
        "",
        "| configuration | options | s on R | ms/img on R | s on i.i.d. |",
        "|---|---|---:|---:|---:|",
    ]
    n_pool = pool["identity"]["images"]
    for c in report["configurations"]:
        s = timing["pool_seconds"].get(c["name"])
        opts = ", ".join(f"{key}={v}" for key, v in c["options"].items())
        lines.append(
            f"| {c['name']} | {opts} | {_f(s, 1)} | {_f(None if s is None else 1e3 * s / n_pool, 1)} | "
            f"{_f(timing['iid_seconds'].get(c['name']), 1)} |"
        )
    lines += [
        "",
        f"Total: {timing['total_seconds']:.1f} s this run "
        f"(pool written in {timing['pool_write_seconds']:.1f} s"
        + (f"; added {timing['added']} by Algorithm 2" if timing.get("added") else "")
        + (
            f"; tie-break sensitivity {timing['tie_break_seconds']:.1f} s"
            if timing.get("tie_break_seconds") is not None
            else ""
        )
        + "); caption times include earlier runs' when resumed from checkpoints."
        + (
            f" All runs of this study: {' + '.join(f'{t:.1f}' for t in timing['runs_seconds'])} = "
            f"{sum(timing['runs_seconds']):.1f} s."
            if len(timing.get("runs_seconds") or []) > 1
            else ""
        ),
        "",
    ]
    if report["referee"]:
        lines += _ranking_sections(report)
    if report.get("tie_break"):
        lines += _tie_sections(report)
    lines += [
        "## Duplicated captions on R (Fig. 12's shape)",
        "",
        "| configuration | duplicated | rate | word classes |",
        "|---|---:|---:|---:|",
    ]
    for n, d in report["duplicated"].items():
        lines.append(
            f"| {n} | {d['duplicated']} / {d['captions']} | {100 * d['rate']:.2f}% | {d['classes']} |"
        )
    lines += [
        "",
        "## Most discrepant images",
        "",
        "Per pair, its two most discrepant images not shown for an earlier pair (rank in D_ij).",
        "",
        "| pair | image | rank | S | captions |",
        "|---|---:|---:|---:|---|",
    ]
    for ex in report["examples"]:
        caps = "<br>".join(
            f"**{n}**: {t}" if n in ex["pair"] else f"{n}: {t}" for n, t in ex["captions"].items()
        )
        lines.append(
            f"| {ex['pair'][0]} vs {ex['pair'][1]} | {ex['id']} | {ex['rank']} | "
            f"{_f(ex['similarity'])} | {caps} |"
        )
    lines += ["", "![most discrepant images](mad_discrepant.png)", ""]
    lines += [
        "## Discrepant sets D_ij",
        "",
        f"Most discrepant first (all {k} per pair in `mad.json`, `discrepant_sets`).",
        "",
        "| pair | mean S | first images |",
        "|---|---:|---|",
    ]
    for pair in report["pairs"]:
        files = report["discrepant_sets"][f"{pair['a']} vs {pair['b']}"]
        shown = ", ".join(f"`{Path(f).name}`" for f in files[:6]) + (", …" if len(files) > 6 else "")
        lines.append(f"| {pair['a']} vs {pair['b']} | {_f(sum(pair['similarity']) / k)} | {shown} |")
    lines.append("")
    if report["referee"]:
        lines += [
            "## The findings of Wan et al. (2022), here",
            "",
            *_claims(report),
            "",
            "No figure here has an interval: p_ij is the mean of the referee's per-image scores over the k "
            "images of D_ij, but those scores are not stored in mad.json (a bootstrap over each D_ij's "
            "images, re-ranking every resample, needs `compcap-lab mad` to store them)"
            + (
                "; the tie-break sensitivity above is the spread that can be shown."
                if (report.get("tie_break") or {}).get("summary")
                else "."
            ),
            "",
            "![SRCC vs k](mad_stability.png)",
            "",
        ]
    return "\n".join(lines)


def _ranking_sections(report: dict[str, Any]) -> list[str]:
    names, results, iid = report["names"], report["results"], report.get("iid")
    metrics = list(results)
    head = "| configuration | " + " | ".join(f"q ({LABEL[e]}) | MAD rank ({LABEL[e]})" for e in metrics)
    head += " | i.i.d. CIDEr-D | i.i.d. rank |" if iid else " |"
    lines = [
        "## MAD ranking and the i.i.d. ranking",
        "",
        head,
        "|---|" + "---:|" * (2 * len(metrics) + (2 if iid else 0)),
    ]
    for n in names:
        cells = [f"{_f(results[e]['q'][n], 4)} | {results[e]['ranking'].index(n) + 1}" for e in metrics]
        if iid:
            cells.append(f"{_f(iid['cider_d'][n])} | {iid['ranking'].index(n) + 1}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("")
    for e in metrics:
        lines.append(f"- {LABEL[e]}: {' > '.join(results[e]['ranking'])}")
    if iid:
        lines.append(
            f"- i.i.d. CIDEr-D ({iid['images']} images of `{iid['data']}`): {' > '.join(iid['ranking'])}"
        )
        lines.append(
            "- Spearman's ρ (MAD q vs i.i.d. CIDEr-D): "
            + ", ".join(f"{LABEL[e]} {_f(iid['spearman'][e], 3)}" for e in metrics)
        )
    else:
        lines.append("- no i.i.d. test set was found (`--iid-data`): no conventional ranking")
    lines += ["", "## Score and dominance matrices (at the largest k)", ""]
    for e in metrics:
        lines += _matrix(f"p ({LABEL[e]}; row i's score on D_ij):", names, report["p"][e][str(report["k"])])
        lines += _matrix(f"F ({LABEL[e]}):", names, results[e]["F"])
    lines += [
        "## Perron check (power iteration against numpy.linalg.eig)",
        "",
        "| metric | λ (power) | λ (eig) | residual max‖Fq − λq‖ | max ‖q − eig‖ | ≤ 1e-9 |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for e in metrics:
        c = results[e]["perron_check"]
        lines.append(
            f"| {LABEL[e]} | {c['lambda_power']:.6f} | {c['lambda_eig']:.6f} | {c['residual']:.1e} | "
            f"{c['max_abs_diff']:.1e} | {'yes' if results[e]['residual_ok'] else '**no**'} |"
        )
    lines += ["", "## Stability: SRCC between q at k and q at the largest k (Fig. 10's shape)", ""]
    lines += ["| k | " + " | ".join(LABEL[e] for e in metrics) + " |", "|---:|" + "---:|" * len(metrics)]
    for k in report["ks"]:
        lines.append(f"| {k} | " + " | ".join(_f(results[e]["stability"][str(k)]) for e in metrics) + " |")
    return [*lines, ""]


def summary_table(report: dict[str, Any]) -> str:
    """A few lines for the terminal: per configuration, seconds, q and rank per metric, i.i.d. CIDEr-D."""
    metrics, iid = list(report["results"]), report.get("iid")
    head = f"{'configuration':<16}{'s on R':>9}" + "".join(
        f"{'q ' + LABEL[e]:>16}{'rank':>6}" for e in metrics
    )
    head += f"{'iid CIDEr-D':>13}{'rank':>6}" if iid else ""
    lines = [head]
    for n in report["names"]:
        row = f"{n:<16}{report['timing']['pool_seconds'].get(n, 0.0):>9.1f}"
        for e in metrics:
            r = report["results"][e]
            row += f"{r['q'][n]:>16.4f}{r['ranking'].index(n) + 1:>6}"
        if iid:
            row += f"{iid['cider_d'][n]:>13.3f}{iid['ranking'].index(n) + 1:>6}"
        lines.append(row)
    ties = report.get("tie_break")
    for e in metrics:
        rho = iid["spearman"][e] if iid else None
        sm = (ties or {}).get("summary", {}).get(e)
        lines.append(
            f"{LABEL[e]}: residual {report['results'][e]['perron_check']['residual']:.1e}"
            + (f", ρ vs i.i.d. {_f(rho, 3)}" if iid else "")
            + (
                f", ρ vs {sm['alternatives']} other tie-breaks ≥ {_f(sm['min_spearman'], 2)}"
                f" (top changed {sm['top_changed']}×, bottom {sm['bottom_changed']}×)"
                if sm
                else ""
            )
        )
    if ties:
        lines.append(tie_statement(report).replace("**", ""))
    return "\n".join(lines)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render_discrepant(report: dict[str, Any], path: Path) -> None:
    """One row per example: the image, then every configuration's caption (the pair's two in bold)."""
    from PIL import Image

    plt = _plt()
    examples = report["examples"]
    rows = max(1, len(examples))
    fig, axes = plt.subplots(rows, 2, figsize=(11, 1.9 * rows), squeeze=False, width_ratios=[1, 5])
    for r, ex in enumerate(examples):
        with Image.open(Path(report["pool"]["root"]) / ex["file_name"]) as im:
            axes[r][0].imshow(im.convert("RGB"))
        axes[r][0].set_title(f"id {ex['id']}  #{ex['rank']}  S={ex['similarity']:.2f}", fontsize=7)
        text = axes[r][1]
        text.set_xlim(0, 1)
        text.set_ylim(0, 1)
        n = len(ex["captions"]) + 1
        text.text(
            0, 1 - 0.5 / n, f"{ex['pair'][0]} vs {ex['pair'][1]}", fontsize=8, style="italic", va="center"
        )
        for c, (name, caption) in enumerate(ex["captions"].items(), start=1):
            weight = "bold" if name in ex["pair"] else "normal"
            text.text(0, 1 - (c + 0.5) / n, f"{name}: {caption}", fontsize=7, weight=weight, va="center")
    for ax in axes.flat:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def render_stability(report: dict[str, Any], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3))
    for e, r in report["results"].items():
        ks = sorted(int(k) for k in r["stability"])
        values = [r["stability"][str(k)] for k in ks]
        ax.plot(ks, [float("nan") if v is None else v for v in values], marker="o", label=LABEL[e])
    ax.axhline(STABLE_SRCC, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("k")
    ax.set_ylabel(f"SRCC vs k = {report['k']}")
    ax.set_ylim(-1.05, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
