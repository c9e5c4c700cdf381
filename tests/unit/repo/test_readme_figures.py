"""A figure in the README or the documentation site (``docs/*.md``) must come from a committed report.

Each test reads a paragraph of the README or a docs page and the committed report it cites and checks
that every figure the paragraph states is the report's, at the precision the README prints it. A rerun
that changes a report fails here until the README follows. Covered: the live-probe systematicity table
and its per-category line (``reports/probes/systematicity_*.json``), the two MAD paragraphs
(``reports/mad.json``, ``reports/mad_zoo/mad.json``: rankings, ρ, stability, Perron residual, times,
ties at S = 0), the examples table (``docs/examples/examples.md``), the probe-set build time
(``model_repo/build_report.json``) and the substitutivity study on the default repository
(``reports/substitutivity_default/substitutivity.json``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
# the README and the hand-written docs pages, where the measurements moved (docs/benchmarks.md, …)
README = "\n\n".join(
    p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
)
LABEL = {"cider_d": "CIDEr-D", "tuple_f1": "tuple F1"}
NUMBER = r"−?\d[\d ]*(?:\.\d+)?"  # as the README prints them: "5 000", "0.786", "−0.4"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _paragraph(start: str) -> str:
    """The README paragraph (blank-line delimited) that begins with ``start``, whitespace flattened."""
    found = [p for p in re.split(r"\n\s*\n", README) if p.lstrip().startswith(start)]
    assert len(found) == 1, f"{len(found)} README paragraphs begin with {start!r}"
    return _flat(found[0])


def _value(text: str) -> float:
    return float(text.replace(" ", "").replace("−", "-"))


def _printed(value: float, text: str) -> bool:
    """Whether ``text`` is ``value`` at the precision ``text`` has (its number of decimals)."""
    plain = text.replace(" ", "").replace("−", "-")
    if "e" in plain:  # 1.8e-14: the mantissa's decimals
        return f"{value:.{len(plain.split('e')[0].partition('.')[2])}e}" == plain
    decimals = len(plain.partition(".")[2])
    return f"{value:.{decimals}f}" == plain or (decimals == 0 and round(value) == int(plain))


def _report(path: str) -> dict[str, Any]:
    return dict(json.loads((ROOT / path).read_text(encoding="utf-8")))


def _pct(text: str) -> float:
    return _value(text.rstrip("%")) / 100


# ------------------------------------------------------------------------------------- live probes
PROBE_ROWS = {
    "beam 5": "reports/probes/systematicity_butr.json",
    "BUTR+RR, beam 100": "reports/probes/systematicity_butr_rr_butr.json",
}


def test_systematicity_table_is_the_probe_reports() -> None:
    for row, path in PROBE_ROWS.items():
        match = re.search(
            rf"^\| {re.escape(row)} \| ([\d.]+%) \| ([\d.]+%) \| ([\d.]+%) / ([\d.]+%) \|$", README, re.M
        )
        assert match, f"README has no systematicity row {row!r}"
        result = _report(path)["result"]
        want = [
            result["held_out"]["recall"]["5"],
            result["seen"]["recall"]["5"],
            result["false_composition"]["1"],
            result["false_composition"]["5"],
        ]
        for text, value in zip(match.groups(), want, strict=True):
            assert _printed(100 * value, text.rstrip("%")), f"{row}: README {text}, {path} {100 * value:.3f}%"


def test_systematicity_per_category_line_is_the_probe_reports() -> None:
    text = _paragraph("Per category (Recall@5, BUTR+RR; held out vs seen):")
    rerank, _, plain = text.partition("(plain beam 5:")
    names = re.findall(r"(colour|size|verb) (\w+) [\d.]+ vs", rerank)
    assert len(names) == 6
    categories = [f"{a}_{b}" for a, b in names]
    pairs = {
        "BUTR+RR, beam 100": re.findall(r"([\d.]+) vs ([\d.]+)", rerank),
        "beam 5": re.findall(r"([\d.]+)/([\d.]+)", plain),
    }
    for row, found in pairs.items():
        result = _report(PROBE_ROWS[row])["result"]
        assert len(found) == len(categories), row
        for category, (held, seen) in zip(categories, found, strict=True):
            for split, printed in (("held_out", held), ("seen", seen)):
                value = 100 * result[split]["per_category"][category]["5"]
                assert _printed(value, printed), f"{row} {category} {split}: README {printed}, {value:.3f}"


# ---------------------------------------------------------------------------------------------- MAD
def _check_rankings(text: str, report: dict[str, Any], order: list[str]) -> None:
    """Every chain "A > B > ..." of all the report's configurations, in the order ``order`` names
    them: a metric's MAD ranking or ``iid`` (the i.i.d. CIDEr-D ranking)."""
    names = sorted(report["names"], key=len, reverse=True)
    name = "|".join(re.escape(n) for n in names)
    chains = [
        c.split(" > ") for c in re.findall(rf"(?:{name})(?: > (?:{name}))+", text) if c.count(" > ") >= 2
    ]
    want = [report["iid"]["ranking"] if o == "iid" else report["results"][o]["ranking"] for o in order]
    assert chains == want


def _check_stability(text: str, report: dict[str, Any]) -> None:
    """ "Stability (SRCC ...): CIDEr-D 0.64 at k = 10, 0.98–1.00 from k = 55 on; tuple F1 0.93–1.00
    at every k." — each figure the report's SRCC at that k, or the min–max over those k."""
    match = re.search(r"Stability \(SRCC[^)]*\): (.*?)\.(?: |$)", text)
    assert match, "no stability sentence"
    stability = {e: {int(k): v for k, v in r["stability"].items()} for e, r in report["results"].items()}
    seen = set()
    for clause in match.group(1).split("; "):
        metric = next(e for e, label in LABEL.items() if clause.startswith(label + " "))
        seen.add(metric)
        srcc = stability[metric]
        for item in clause[len(LABEL[metric]) + 1 :].split(", "):
            if at := re.fullmatch(r"([\d.]+) at k = (\d+)", item):
                assert _printed(srcc[int(at.group(2))], at.group(1)), (metric, item)
                continue
            span = re.fullmatch(r"([\d.]+)(?:–([\d.]+))? (?:from k = (\d+) on|at every k)", item)
            assert span, f"cannot read {item!r}"
            values = [v for k, v in srcc.items() if k >= int(span.group(3) or 0)]
            low, high = span.group(1), span.group(2) or span.group(1)
            assert _printed(min(values), low) and _printed(max(values), high), item
    assert seen == set(report["results"])


def _check_mad(text: str, report: dict[str, Any], order: list[str]) -> None:
    _check_rankings(text, report, order)
    rhos = re.findall(rf"ρ = ({NUMBER})", text)
    assert len(rhos) == 2
    for metric, rho in zip(("cider_d", "tuple_f1"), rhos, strict=True):
        assert _printed(report["iid"]["spearman"][metric], rho), (metric, rho)
    iid = re.search(r"(\d[\d ]*) (?:test images|images of the zoo's evaluation world)", text)
    assert iid and _value(iid.group(1)) == report["iid"]["images"]
    _check_stability(text, report)
    residual = re.search(r"Perron residual[^\d]*(\d\.\de-\d+)", text)
    worst = max(r["perron_check"]["residual"] for r in report["results"].values())
    assert residual and _printed(worst, residual.group(1)), (residual and residual.group(1), worst)
    distinct = re.search(r"(\d[\d ]*) distinct images in D", text)
    union = len({i for p in report["pairs"] for i in p["indices"]})
    assert distinct and _value(distinct.group(1)) == union
    pool, images = report["timing"]["pool_seconds"], report["pool"]["identity"]["images"]
    found = 0
    for name, seconds in pool.items():
        match = re.search(rf"(?<![\w+]){re.escape(name)} (\d+) s(?: \((\d+) ms)?", text)
        if match is None:
            continue
        found += 1
        assert _printed(seconds, match.group(1)), (name, match.group(1), seconds)
        if match.group(2):
            assert _printed(1e3 * seconds / images, match.group(2)), (name, match.group(2))
    assert found >= 3
    added = re.search(rf"`--add {report['timing']['added']}`\**,? ({NUMBER}) s", text)
    assert added and _printed(report["timing"]["total_seconds"], added.group(1))


def _check_ties(text: str, report: dict[str, Any]) -> None:
    """The ties at S = 0 as the report's ``tie_break`` measured them on the whole pool: in how many pairs
    the tie-break decides D_ij, the share of R at S = 0, and the rankings under the other tie-breaks."""
    ties = report["tie_break"]
    match = re.search(r"the tie-break decides D_ij in (\d+) of (\d+) pairs", text)
    assert match and (int(match.group(1)), int(match.group(2))) == (ties["by_tie_break"], len(ties["pairs"]))
    zero = re.search(rf"S = 0 for ({NUMBER})–({NUMBER})% of the ({NUMBER}) pool images", text)
    shares = [p["zero_share"] for p in ties["pairs"]]
    assert zero and _printed(100 * min(shares), zero.group(1)) and _printed(100 * max(shares), zero.group(2))
    assert _value(zero.group(3)) == report["pool"]["identity"]["images"]
    alternatives = re.search(r"(\d+) other tie-breaks", text)
    assert alternatives and int(alternatives.group(1)) == len(ties["labels"])
    for metric, summary in ties["summary"].items():
        match = re.search(
            rf"{LABEL[metric]} ρ ≥ ({NUMBER}), median ({NUMBER}); top changed in (\d+), bottom in (\d+)",
            text,
        )
        assert match, metric
        assert _printed(summary["min_spearman"], match.group(1))
        assert _printed(summary["median_spearman"], match.group(2))
        assert (int(match.group(3)), int(match.group(4))) == (
            summary["top_changed"],
            summary["bottom_changed"],
        )
    last = re.search(r"\((\S+) is last under (\d+) of the (\d+)\)", text)
    cider = ties["summary"]["cider_d"]
    assert last and last.group(1) == report["results"]["cider_d"]["ranking"][-1]
    assert (int(last.group(2)), int(last.group(3))) == (
        cider["alternatives"] - cider["bottom_changed"],
        cider["alternatives"],
    )


def _check_runs(text: str, report: dict[str, Any]) -> None:
    """ "the whole study 9 min 52 s in two runs": the sum of ``timing.runs_seconds``."""
    runs = sum(report["timing"]["runs_seconds"])
    whole = re.search(r"the whole study (\d+) min (\d+) s", text)
    assert whole and (int(whole.group(1)), int(whole.group(2))) == divmod(round(runs), 60)


def test_mad_default_paragraph_is_reports_mad() -> None:
    report = _report("reports/mad.json")
    text = _paragraph("**Measured** (`reports/mad.md`")
    _check_mad(text, report, ["cider_d", "tuple_f1"])
    _check_runs(text, report)
    _check_ties(text, report)
    assert report["results"]["cider_d"]["ranking"][-1] == "WEAK"


def test_mad_zoo_paragraph_is_reports_mad_zoo() -> None:
    report = _report("reports/mad_zoo/mad.json")
    text = _paragraph("**On the zoo** (`reports/mad_zoo/`")
    _check_mad(text, report, ["cider_d", "iid", "tuple_f1"])
    n = report["names"]
    sat, m2 = n.index("SAT"), n.index("M2")
    p = report["p"]["cider_d"][str(report["k"])]
    match = re.search(r"SAT scores ([\d.]+) CIDEr-D and M2 ([\d.]+)", text)
    assert match and _printed(p[sat][m2], match.group(1)) and _printed(p[m2][sat], match.group(2))
    _check_runs(text, report)
    _check_ties(text, report)


# ------------------------------------------------------------------------------- examples, probe sets
def _example_rows(text: str) -> dict[str, list[str]]:
    rows = re.findall(r"^\| !\[example \d+\]\(([^)]+)\) \| (.+) \|$", text, re.M)
    return {Path(image).name: [c.strip() for c in cells.split(" | ")] for image, cells in rows}


def test_examples_table_is_docs_examples() -> None:
    committed = _example_rows((ROOT / "docs/examples/examples.md").read_text(encoding="utf-8"))
    shown = _example_rows(README)
    assert len(committed) == 3 and shown == committed


def test_probe_set_build_time_is_the_build_report() -> None:
    seconds = _report("model_repo/build_report.json")["timings_s"]["probes"]
    text = _flat(README)
    found = re.findall(
        r"(?i)(?:probe sets|probesets)(?:(?!probe)[^.|]|\.\d){0,120}?(≈ ?)?"
        r"(?<![a-z])(\d[\d ]*(?:\.\d+)?) ?(s|min)\b",  # not a name's digit (k8s)
        text,
    )
    assert len(found) >= 3, found
    for approx, number, unit in found:
        assert not approx and unit == "s" and _printed(seconds, number), (approx, number, unit, seconds)


@pytest.mark.parametrize("path", ["reports/mad.md", "reports/mad_zoo/mad.md"])
def test_mad_reports_state_whether_the_tie_break_decides(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    assert "## Ties at S = 0" in text
    assert "decided by the tie-break in" in text or "cannot be told" in text


# ------------------------------------------------------------------------------------- substitutivity
def test_default_substitutivity_figures_are_the_reports() -> None:
    report = _report("reports/substitutivity_default/substitutivity.json")
    text = _flat(README)
    found = re.search(
        rf"Ot vs St on ({NUMBER}) of the ({NUMBER}) substituted images "
        rf"at BLEU-4 ({NUMBER}), CIDEr-D ({NUMBER})",
        text,
    )
    assert found, "the default substitutivity sentence is missing"
    tails, images, bleu4, cider = found.groups()
    row = report["rows"]["Ot vs St"]
    assert _value(tails) == report["images_with_tails"] == row["images"]
    assert _value(images) == report["images"]
    assert _printed(100 * row["bleu4"], bleu4) and _printed(100 * row["cider_d"], cider)


# ------------------------------------------------------------------------------------ reproduction
def test_reproduction_headline_is_the_report_with_its_intervals() -> None:
    """The README's main result: the ratio BUTR+RR / BUTD with its interval, both means with theirs,
    the number of held-out pairs, and FULL / BUTD — all from ``reports/reproduction.json``."""
    report = _report("reports/reproduction.json")
    text = _paragraph("It decodes each held-out concept pair's images")
    found = re.search(
        r"recalls held-out pairs ([\d.]+)× as often as plain BUTD, 95% interval ([\d.]+)–([\d.]+)× — "
        r"mean Recall@5 ([\d.]+) \[([\d.]+), ([\d.]+)\] against ([\d.]+) \[([\d.]+), ([\d.]+)\], "
        r"intervals from a bootstrap over the (\d+) held-out pairs and their images .*? "
        r"a model that saw every pair reaches ([\d.]+)× BUTD",
        text,
    )
    assert found, "the headline sentence with its intervals is missing"
    ratio = report["intervals"]["ratios"]["BUTR+RR / BUTD"]
    rr, butd = (report["intervals"]["recall_at_k"][row]["5"] for row in ("BUTR+RR", "BUTD"))
    want = [
        ratio["estimate"],
        ratio["low"],
        ratio["high"],
        rr["estimate"],
        rr["low"],
        rr["high"],
        butd["estimate"],
        butd["low"],
        butd["high"],
    ]
    for printed, value in zip(found.groups()[:9], want, strict=True):
        assert _printed(value, printed), (printed, value)
    assert int(found.group(10)) == rr["groups"] == butd["groups"] == ratio["groups"]
    table = report["table"]
    full = table["FULL"]["test"]["recall_at_5_mean"] / table["BUTD"]["test"]["recall_at_5_mean"]
    assert _printed(full, found.group(11))
    assert _printed(table["BUTR+RR"]["test"]["recall_at_5_mean"], found.group(4))


def _signed(text: str) -> float:
    return _value(text.lstrip("+"))


def test_reproduction_headline_names_the_control_with_its_paired_test() -> None:
    """The README's headline names the control (BUTD re-ranked by VSE++) with the paired
    difference, its interval and p-value, and docs/benchmarks.md gives it in points with the control
    rows' means and BUTD+VSE++ against BUTD — all ``reports/reproduction.json``'s."""
    report = _report("reports/reproduction.json")
    paired = report["intervals"]["paired"]
    text = _paragraph("It decodes each held-out concept pair's images")
    found = re.search(
        r"the control, BUTD's own beams re-ranked the same way by a separately trained VSE\+\+, differs by "
        r"no detectable amount: BUTR\+RR − BUTD\+VSE\+\+ = ([+−][\d.]+) \[([+−][\d.]+), ([+−][\d.]+)\] "
        r"in mean Recall@5, "
        r"paired on the same (\d[\d ]*) pair-image cases, permutation p = (\d+(?:\.\d+)?)",
        text,
    )
    assert found, "the headline's control sentence is missing"
    test = paired["BUTR+RR vs BUTD+VSE++"]
    d = test["difference"]
    for printed, value in zip(found.groups()[:3], (d["estimate"], d["low"], d["high"]), strict=True):
        assert _printed(value, printed.lstrip("+")), (printed, value)
    assert _value(found.group(4)) == d["units"] and _printed(test["p_value"], found.group(5))
    assert d["low"] < 0 < d["high"], "the docs say no difference is detected: the interval must span 0"
    docs = _flat(README)
    found = re.search(
        r"\(BUTD\+VSE\+\+, ([\d.]+)\) and by the group's BUTR ranking head \(([\d.]+)\)\. Paired on the same "
        r"(\d[\d ]*) cases, BUTR\+RR − BUTD\+VSE\+\+ = ([+−][\d.]+) points \[([+−][\d.]+), ([+−][\d.]+)\], "
        r"permutation p = (\d+(?:\.\d+)?): .*? \(BUTD\+VSE\+\+ − BUTD = ([+−][\d.]+) "
        r"\[([+−][\d.]+), ([+−][\d.]+)\], p (?:= |< )(\d+(?:\.\d+)?)"
        r"(?:, the floor of [\d ]+ permutations)?\)",
        docs,
    )
    assert found, "docs/benchmarks.md's control sentence is missing"
    table = report["table"]
    assert _printed(100 * table["BUTD+VSE++"]["test"]["recall_at_5_mean"], found.group(1))
    assert _printed(100 * table["BUTD+BUTR head"]["test"]["recall_at_5_mean"], found.group(2))
    assert _value(found.group(3)) == d["units"]
    for at, name in ((4, "BUTR+RR vs BUTD+VSE++"), (8, "BUTD+VSE++ vs BUTD")):
        t = paired[name]
        want = [100 * t["difference"][k] for k in ("estimate", "low", "high")]
        for printed, value in zip(found.groups()[at - 1 : at + 2], want, strict=True):
            assert _printed(value, printed.lstrip("+")), (name, printed, value)
        printed = found.group(at + 3)  # a p at the permutation floor reads "p < 0.0002"
        floor = f"p < {printed}" in found.group(0) and t["p_value"] < _value(printed)
        assert _printed(t["p_value"], printed) or floor, name


def test_the_seeds_sentence_is_the_seeds_report() -> None:
    """The README's spread over training seeds and the pooled paired test of BUTR+RR
    against the control are ``reports/seeds.json``'s, over at least 3 seeds."""
    report = _report("reports/seeds.json")
    text = _paragraph("It decodes each held-out concept pair's images")
    found = re.search(
        r"Over (\w+) training seeds of group (\d), BUTR\+RR's mean Recall@5 is ([\d.]+) ± ([\d.]+) and "
        r"BUTD\+VSE\+\+'s ([\d.]+) ± ([\d.]+) \(mean ± sd over seeds\); pooled, BUTR\+RR − BUTD\+VSE\+\+ = "
        r"([+−][\d.]+) \[([+−][\d.]+), ([+−][\d.]+)\], p = (\d+(?:\.\d+)?) — not significant either",
        text.replace("(`make seeds`)", "").replace("  ", " ").replace(" ,", ","),
    )
    assert found, "the README's seeds sentence is missing"
    assert {"three": 3}.get(found.group(1)) == len(report["per_seed"]) >= 3
    assert int(found.group(2)) == report["group"]
    rr, vsepp = report["across"]["BUTR+RR"], report["across"]["BUTD+VSE++"]
    want = [rr["mean"], rr["sd"], vsepp["mean"], vsepp["sd"]]
    for printed, value in zip(found.groups()[2:6], want, strict=True):
        assert _printed(value, printed), (printed, value)
    pooled = report["pooled"]["BUTR+RR vs BUTD+VSE++"]
    d = pooled["difference"]
    for printed, value in zip(found.groups()[6:9], (d["estimate"], d["low"], d["high"]), strict=True):
        assert _printed(value, printed.lstrip("+")), (printed, value)
    assert _printed(pooled["p_value"], found.group(10))
    assert d["low"] < 0 < d["high"] and pooled["p_value"] >= 0.05


def test_reproduction_targets_in_the_docs_are_stated_on_their_intervals() -> None:
    """docs/benchmarks.md's reproduction paragraph: both ratios with their intervals, and whether each
    target holds on the lower bound, as ``reports/reproduction.json`` has them."""
    report = _report("reports/reproduction.json")
    text = _flat(README)
    found = re.search(
        r"mean Recall@5 on held-out pairs ([\d.]+) against BUTD's ([\d.]+) \(([\d.]+)×, 95% interval "
        r"([\d.]+)–([\d.]+)×; target 2×, (met on the lower bound|met by the point estimate only)\) and "
        r"FULL's ([\d.]+) \(FULL = ([\d.]+)× BUTR\+RR, ([\d.]+)–([\d.]+)×; target ≥ 1.5× "
        r"(met on the lower bound|met by the point estimate only)\)",
        text,
    )
    assert found, "the docs' reproduction sentence with intervals is missing"
    table, ratios = report["table"], report["intervals"]["ratios"]
    r5 = {row: table[row]["test"]["recall_at_5_mean"] for row in ("BUTR+RR", "BUTD", "FULL")}
    assert _printed(100 * r5["BUTR+RR"], found.group(1)) and _printed(100 * r5["BUTD"], found.group(2))
    assert _printed(100 * r5["FULL"], found.group(7))
    for (name, target), at in ((("BUTR+RR / BUTD", 2.0), 3), (("FULL / BUTR+RR", 1.5), 8)):
        ratio = ratios[name]
        estimate, low, high, verdict = (found.group(at + i) for i in range(4))
        assert _printed(ratio["estimate"], estimate) and _printed(ratio["low"], low), name
        assert _printed(ratio["high"], high), name
        assert verdict == (
            "met on the lower bound" if ratio["low"] >= target else "met by the point estimate only"
        )


def test_default_substitutivity_agreement_is_the_reports() -> None:
    """How often S follows O up to the substituted word, with its interval, and the
    Ot vs St row on those images only."""
    report = _report("reports/substitutivity_default/substitutivity.json")
    text = _flat(README)
    found = re.search(
        rf"it does on ({NUMBER}) of the ({NUMBER}) images "
        rf"\(({NUMBER})%, 95% interval ({NUMBER})–({NUMBER})%\)"
        rf".*? On those ({NUMBER}) alone \(({NUMBER}) with both tails\) Ot vs St is BLEU-4 ({NUMBER}), "
        rf"CIDEr-D ({NUMBER})\.",
        text,
    )
    assert found, "the agreement sentence is missing"
    agreed = report["agreement"]
    share, row = agreed["share"], agreed["row"]
    follows, images, pct, low, high, again, tails, bleu4, cider = found.groups()
    assert _value(follows) == _value(again) == agreed["follows"] and _value(images) == agreed["images"]
    assert _printed(100 * share["estimate"], pct) and _printed(100 * share["low"], low)
    assert _printed(100 * share["high"], high) and _value(tails) == agreed["tails"] == row["images"]
    assert _printed(100 * row["bleu4"], bleu4) and _printed(100 * row["cider_d"], cider)


# ------------------------------------------------------------------------------------------- INT8
INT8_ROWS = {
    "step limit, rows/s at its best batch": "step_limit_rows_per_s",
    "every model call of a caption (compute limit), captions/s": "compute_limit_captions_per_s",
    "gateway, 32 clients, captions/s": "captions_per_s_at_32",
    "gateway, 32 clients, p50 ms": "p50_ms_at_32",
    "single decode, ms": "single_decode_ms",
}


def test_int8_figures_are_the_committed_bench_report() -> None:
    """The INT8 speed table and its summary row come from
    ``reports/perf/bench_int8_auto_threads.json``; no INT8 gate or speed figure without a committed
    source is quoted (the 1.39× step limit and the gate's per-run FP32 → INT8 table are gone)."""
    comparison = _report("reports/perf/bench_int8_auto_threads.json")["comparison"]
    section = README[README.index("## INT8 models") : README.index("## FP16 models")]
    for label, key in INT8_ROWS.items():
        match = re.search(
            rf"^\| {re.escape(label)} \| ({NUMBER}) \| ({NUMBER}) \| \**({NUMBER})×\** \|$", section, re.M
        )
        assert match, label
        fp32, int8, ratio = match.groups()
        want = comparison[key]
        assert _printed(want["fp32"], fp32) and _printed(want["int8"], int8), label
        assert _printed(want["ratio"], ratio), label
    summary = re.search(r"^\| INT8 against FP32 \| step limit ([\d.]+)×, gateway ([\d.]+)× ", README, re.M)
    assert summary
    assert _printed(comparison["step_limit_rows_per_s"]["ratio"], summary.group(1))
    assert _printed(comparison["captions_per_s_at_32"]["ratio"], summary.group(2))
    assert "1.39×" not in README and "INT8 | change | top-1 identical" not in README
    assert "FP32 → INT8 | change" not in section


def test_the_readme_research_paragraph_is_the_reports_and_claims_no_more() -> None:
    """The README's research paragraph (at most 8 lines): the headline ratio with its interval, the
    control's paired difference in points with its interval and p, the pooled seed test, the head-to-head
    of the two rankers on BUTD's beams and re-ranking's own gain — ``reports/reproduction.json``'s and
    ``reports/seeds.json``'s at the printed precision; the control is "no difference is detected", never
    that joint training "does not add"."""
    start = "What the lab's reproduction of Nikolaus et al. (2019) shows"
    raw = [
        p
        for p in re.split(r"\n\s*\n", (ROOT / "README.md").read_text(encoding="utf-8"))
        if p.startswith(start)
    ]
    assert len(raw) == 1 and len(raw[0].strip().splitlines()) <= 8
    text = _flat(raw[0])
    report, seeds = _report("reports/reproduction.json"), _report("reports/seeds.json")
    paired = report["intervals"]["paired"]
    ratio = re.search(
        r"recalls held-out pairs ([\d.]+)× as often as plain BUTD, 95% interval ([\d.]+)–([\d.]+)×", text
    )
    assert ratio
    r = report["intervals"]["ratios"]["BUTR+RR / BUTD"]
    for printed, value in zip(ratio.groups(), (r["estimate"], r["low"], r["high"]), strict=True):
        assert _printed(value, printed), (printed, value)
    num = r"([+−][\d.]+)"
    claims = {
        "BUTR+RR vs BUTD+VSE++": (
            paired,
            rf"no difference is detected: BUTR\+RR − BUTD\+VSE\+\+ = {num} points ",
        ),
        "pooled": (seeds["pooled"], rf"pooled over three training seeds {num} "),
        "BUTD+BUTR head vs BUTD+VSE++": (paired, rf"the jointly trained head leads by {num} "),
        "BUTD+VSE++ vs BUTD": (paired, rf"BUTD\+VSE\+\+ − BUTD = {num} "),
    }
    for name, (tests, lead) in claims.items():
        found = re.search(lead + rf"\[{num}, {num}\](?:, p = (\d+(?:\.\d+)?))?", text)
        assert found, name
        test = tests["BUTR+RR vs BUTD+VSE++" if name == "pooled" else name]
        want = [100 * test["difference"][k] for k in ("estimate", "low", "high")]
        for printed, value in zip(found.groups()[:3], want, strict=True):
            assert _printed(value, printed.lstrip("+")), (name, printed, value)
        if found.group(4):
            assert _printed(test["p_value"], found.group(4)), name
        if name != "BUTD+VSE++ vs BUTD":
            assert test["difference"]["low"] < 0 < test["difference"]["high"], f"{name}: the interval spans 0"
    assert "does not add" not in text and "recalls as much" not in text
