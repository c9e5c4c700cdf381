"""``compcap-lab render-reports``: every study's Markdown re-rendered from the JSON it wrote beside it, so a
change to a report's wording or its intervals reaches the committed reports without the models or the
data (the reproduction has its own ``compcap-lab report --reuse``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _renderers() -> dict[str, Callable[[dict[str, Any]], str]]:
    from compcap_lab.studies import (
        compositional,
        counterfactual_study,
        explanation_report,
        productivity,
        search_hook,
        seeds,
        substitutivity,
    )
    from compcap_lab.studies.mad import report as mad_report

    return {
        "explanations.json": explanation_report.render_markdown,
        "substitutivity.json": substitutivity.markdown,
        "productivity_length.json": productivity.markdown,
        "productivity_density.json": productivity.markdown,
        "mad.json": mad_report.render_markdown,
        "seeds.json": seeds.markdown,
        "counterfactual.json": counterfactual_study.markdown,
        "search_hook.json": search_hook.render,
        "compositional.json": compositional.markdown,
    }


def rerender(folder: Path) -> list[Path]:
    """Write ``<name>.md`` beside every known study JSON under ``folder``; the paths written."""
    written = []
    for name, render in _renderers().items():
        for source in sorted(folder.rglob(name)):
            target = source.with_suffix(".md")
            report = json.loads(source.read_text(encoding="utf-8"))
            target.write_text(render(report), encoding="utf-8")
            written.append(target)
    return written


__all__ = ["rerender"]
