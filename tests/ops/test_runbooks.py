"""Every alert of ``k8s/monitoring/prometheus-rule.yaml`` has a severity label of the allowed set and a
``runbook_url`` of ``RUNBOOK_BASE`` + an anchor that ``docs/runbooks.md`` really has: the id MkDocs
gives the alert's heading. The anchors are computed by rendering the page with the Markdown extensions
of ``mkdocs.yml`` (the ``toc`` extension's slugify), not by a copy of its rules. Every alert section
of the page names an alert that exists, and the SLO page is in the site's navigation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

from tests.integration.prometheus_server import alert_rules

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks.md"
MKDOCS = ROOT / "mkdocs.yml"
# the runbook page of the docs site (use_directory_urls: false); k8s/monitoring/README.md and the
# page itself say how to point it at where the site is published
RUNBOOK_BASE = "https://compcap.example/runbooks.html#"
SEVERITIES = {"page", "ticket"}


def markdown_extensions() -> tuple[list[str], dict[str, Any]]:
    """``markdown_extensions`` of mkdocs.yml as Python-Markdown's (names, configs)."""
    names: list[str] = []
    configs: dict[str, Any] = {}
    for entry in yaml.safe_load(MKDOCS.read_text())["markdown_extensions"]:
        if isinstance(entry, dict):
            ((name, config),) = entry.items()
            names.append(name)
            configs[name] = config or {}
        else:
            names.append(entry)
    return names, configs


def headings(tokens: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for token in tokens:
        yield token
        yield from headings(token["children"])


def runbook_anchors() -> dict[str, str]:
    """Heading text → its id, as the built site has them."""
    names, configs = markdown_extensions()
    md = markdown.Markdown(extensions=names, extension_configs=configs)
    md.convert(RUNBOOKS.read_text(encoding="utf-8"))
    return {token["name"]: token["id"] for token in headings(md.toc_tokens)}


@pytest.fixture(scope="module")
def anchors() -> dict[str, str]:
    return runbook_anchors()


def test_every_alert_has_an_allowed_severity() -> None:
    for name, rule in alert_rules().items():
        assert rule.get("labels", {}).get("severity") in SEVERITIES, (name, rule.get("labels"))


def test_every_alert_links_to_its_own_section_of_the_runbooks(anchors: dict[str, str]) -> None:
    ids = set(anchors.values())
    for name, rule in alert_rules().items():
        url = rule.get("annotations", {}).get("runbook_url", "")
        assert url.startswith(RUNBOOK_BASE), f"{name}: runbook_url {url!r} does not start with {RUNBOOK_BASE}"
        anchor = url.removeprefix(RUNBOOK_BASE)
        assert anchor in ids, f"{name}: docs/runbooks.md has no heading with the id {anchor!r}"
        assert anchors.get(name) == anchor, f"{name}: its heading is not the one {url} points at"


def test_every_alert_section_of_the_runbooks_is_an_alert(anchors: dict[str, str]) -> None:
    sections = {text for text in anchors if text.startswith("Compcap")}
    assert sections == set(alert_rules()), (
        f"runbooks of no alert: {sorted(sections - set(alert_rules()))}; "
        f"alerts without a runbook: {sorted(set(alert_rules()) - sections)}"
    )


def test_the_slo_and_the_runbooks_are_in_the_site_navigation() -> None:
    nav = yaml.safe_dump(yaml.safe_load(MKDOCS.read_text())["nav"])
    assert "slo.md" in nav and "runbooks.md" in nav
