"""What a probe kind's result looks like to its readers, as data on its record (``ProbeKind.view`` and
``ProbeKind.figures``), served by ``GET /v1/probe-kinds``: the web page draws any kind from its
``KindView`` (``service/web/static/probes.js`` has no table of kinds), and the client labels a result's
figures from its ``Figure`` s (``compcap_client.ProbeKindInfo``).

A ``Chart`` is one of two generic layouts the page draws:

- ``sides``: one bar per row of ``result[rows]`` at the K the page's select picks (``row[value][k]``,
  with its interval ``row[value + "_interval"][k]``), the rows grouped by side — the first of ``sides``
  where ``row[side_field]`` is true, the second where it is false — under each side's mean
  (``result[side.key][value][k]``); when ``result[known]`` is false, every row under ``every``;
- ``bars``: one bar per entry of the mapping ``result[value]`` (a fraction), with its interval
  ``result[value + "_interval"][entry]``, under ``sides[0]``; no K.

``Shares`` adds a table and a chart of class shares per side (the counterfactual probe's top-1
outcomes), each side's with its interval and the paired difference of the two sides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Side:
    """One side of a chart: ``key``, the result's entry of its means (``held_out``); ``css``, its bars'
    colour (``held``, ``seen`` or ``all``); ``name`` in labels and titles; its ``legend``; the heading of
    its rows (``group``); ``row``, a row's label (``{field}``: the row's field); ``note``, a row field
    mapping values to counts listed in the row's title after ``note_label``."""

    key: str
    css: str
    name: str
    legend: str
    group: str
    row: str = "{pair}"
    note: str = ""
    note_label: str = ""


@dataclass(frozen=True)
class Chart:
    """A result's chart (the module's docstring says how each ``layout`` reads the result):
    ``figure``, its name (``sides``: the K follows it, "Recall@" → "Recall@5"); ``about``, one line of
    what it measures; ``title``, what its bars are ("per concept pair"); ``versus``, its two sides said
    together; ``units``, what a row's ``size`` counts (its title's "— 3 of 5 images", ``count`` the
    numerator at K)."""

    layout: Literal["sides", "bars"]
    figure: str
    about: str
    title: str
    sides: tuple[Side, ...]
    versus: str = ""
    every: Side | None = None
    value: str = "recall"
    rows: str = "pairs"
    label: str = "pair"
    side_field: str = "held_out"
    known: str = "held_out_known"
    count: str = "hits"
    size: str = "images"
    units: str = "images"

    def __post_init__(self) -> None:
        if not self.sides or (self.layout == "sides" and len(self.sides) != 2):
            raise ValueError(
                f"a {self.layout} chart needs {'two sides' if self.layout == 'sides' else 'a side'}"
            )


@dataclass(frozen=True)
class Shares:
    """Shares of the classes ``result[classes]`` on each side of the chart: ``result[side.key][value][c]``
    with its interval ``result[side.key][interval][c]``, and the paired test of the first side − the
    second, ``result[difference][value][c]`` (the chart's figure's at K: ``result[difference][chart
    value][k]``). ``names``: a class's words (default: its name with spaces); ``heading``, ``title``,
    ``column`` (the table's first head), ``share`` (what a bar's value is) and ``paired`` (the
    difference row's note) are its words; ``caption`` the table's, ``{field}`` a field of the result."""

    classes: str
    heading: str
    title: str
    column: str
    caption: str
    names: Mapping[str, str] = field(default_factory=dict)
    share: str = "share"
    value: str = "outcomes"
    interval: str = "outcome_intervals"
    difference: str = "difference"
    paired: str = ""


@dataclass(frozen=True)
class KindView:
    """How the web page shows the kind: ``images``, its launcher's images field; ``sizing``, the unit of
    the sizing hint ("images per pair"; "" for none — a ``sides`` chart and a set that lists ``pairs``
    are needed); ``chart`` and ``shares`` (None: the job's summary line only)."""

    images: str = "Images per pair"
    sizing: str = ""
    chart: Chart | None = None
    shares: Shares | None = None

    def __post_init__(self) -> None:
        if self.sizing and (self.chart is None or self.chart.layout != "sides"):
            raise ValueError("the sizing hint reads a sides chart's held-out rows")
        if self.shares is not None and (self.chart is None or self.chart.layout != "sides"):
            raise ValueError("shares are drawn on a sides chart's two sides")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Figure:
    """A headline figure of the kind's result: ``path``, dotted keys into the result with ``*`` for
    every key of a mapping (or index of a list) there; ``label`` with one ``{}`` per ``*``, in order;
    ``interval``, the path of its interval object (default: the last named key ``X`` of ``path`` as
    ``X_interval``, the results' convention)."""

    path: str
    label: str
    interval: str = ""

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "label": self.label, "interval": self.interval or interval_path(self.path)}


def interval_path(path: str) -> str:
    """``held_out.recall.*`` → ``held_out.recall_interval.*``: the last named key gets ``_interval``."""
    keys = path.split(".")
    last = max(n for n, key in enumerate(keys) if key != "*")
    keys[last] += "_interval"
    return ".".join(keys)


__all__ = ["Chart", "Figure", "KindView", "Shares", "Side", "interval_path"]
