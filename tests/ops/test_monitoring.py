"""The monitoring files (``k8s/monitoring``): the rules pass ``promtool check rules`` and their unit tests
``promtool test rules``, every alert has a unit test that fires it, only symptoms page, the Grafana
dashboard is valid and templated and its model filters match every served model, the kustomization
provisions both, and every metric the rules and the dashboard read is one the gateway exports (or one of
Triton's). Runbooks: tests/ops/test_runbooks.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from service.compare.configs import parse_configuration
from service.compare.shadow import ShadowComparer
from service.metrics import Metrics
from service.probes.jobs.gauges import ProbeGauges
from tests.integration.prometheus_server import (
    DASHBOARD,
    MONITORING,
    PROMTOOL,
    RULE_TESTS,
    RULES_FILE_NAME,
    TRITON_GPU_METRICS,
    TRITON_METRICS,
    alert_rules,
    dashboard,
    metric_names,
    panels,
    recording_rules,
    rule_groups,
    selectors,
    substitute,
    targets,
    variable_selectors,
    write_rules_file,
)

needs_promtool = pytest.mark.skipif(
    not PROMTOOL.is_file(), reason=f"{PROMTOOL} is absent (Debian's `prometheus` package ships it)"
)
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
SEVERITIES = ("page", "ticket")
# the alerts that page: symptoms users see (docs/slo.md); every other alert is a ticket
PAGES = {
    "CompcapGatewayDown",
    "CompcapGatewayNoneReady",
    "CompcapCaptionAvailabilityBurn1h",
    "CompcapCaptionAvailabilityBurn6h",
    "CompcapCaptionLatencyBurn1h",
    "CompcapCaptionLatencyBurn6h",
}
# the models of the default repository (export/packaging/package.py names them <captioner>_init / _step,
# <ranker>_image / _text) and an imported captioner's own encoder
SERVED_MODELS = {
    "butr": ["butr_init", "butr_step"],
    "butd": ["butd_init", "butd_step"],
    "vitgpt2": ["vitgpt2_encoder", "vitgpt2_step"],
}
SHARED_MODELS = [
    "visual_encoder",
    "butr_image",
    "butr_text",
    "vsepp_image",
    "vsepp_text",
    "clip_image",
    "clip_text",
]


def gateway_metric_names() -> set[str]:
    """Every series name the gateway can export: its metrics and the probe gauges, on one registry."""
    registry = CollectorRegistry()
    Metrics(registry)
    ProbeGauges(registry)
    ShadowComparer(parse_configuration("shadow"), 0.0, registry)  # exported when a shadow is set
    names = set()
    for family in registry.collect():
        assert family.type in SUFFIXES, (family.name, family.type)
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The extracted rules next to copies of the unit-test files (their ``rule_files`` is relative)."""
    write_rules_file(tmp_path / RULES_FILE_NAME)
    for test in RULE_TESTS.glob("*.yml"):
        shutil.copy(test, tmp_path / test.name)
    return tmp_path


def promtool(*args: str, cwd: Path) -> str:
    result = subprocess.run([str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


@needs_promtool
def test_promtool_check_rules(rules_dir: Path) -> None:
    output = promtool("check", "rules", RULES_FILE_NAME, cwd=rules_dir)
    rules = len(recording_rules()) + len(alert_rules())
    assert f"SUCCESS: {rules} rules found" in output, output


@needs_promtool
def test_promtool_unit_tests(rules_dir: Path) -> None:
    files = sorted(p.name for p in rules_dir.glob("*.yml"))
    assert files, f"no promtool unit tests in {RULE_TESTS}"
    output = promtool("test", "rules", *files, cwd=rules_dir)
    assert output.count("SUCCESS") == len(files), output


def test_unit_tests_evaluate_recording_rules_before_alerts() -> None:
    """Without ``group_eval_order`` promtool evaluates the groups in Go's random map order at each
    step, so an alert reads the last minute's recording rules in some runs and fires a minute late: a
    test at a firing boundary then fails now and then. Each file names every group, in the rule file's
    order, where each recording group comes before the alerts that read it."""
    groups = rule_groups()
    names = [group["name"] for group in groups]
    recorded_in = {r["record"]: i for i, group in enumerate(groups) for r in group["rules"] if "record" in r}
    for i, group in enumerate(groups):
        for rule in group["rules"]:
            for record, j in recorded_in.items():
                if re.search(rf"\b{re.escape(record)}\b", rule["expr"]):
                    name = rule.get("alert") or rule.get("record")
                    assert j <= i, f"{name} reads {record}, which a later group records"
    for test in sorted(RULE_TESTS.glob("*.yml")):
        order = yaml.safe_load(test.read_text()).get("group_eval_order")
        assert order == names, f"{test.name}: group_eval_order {order} is not the rule groups {names}"


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in sorted(RULE_TESTS.glob("*.yml")):
        suite = yaml.safe_load(path.read_text())
        assert suite["rule_files"] == [RULES_FILE_NAME], path
        for test in suite["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = set(alert_rules())
    assert alerts - fired == set(), f"alerts no unit test fires: {sorted(alerts - fired)}"
    assert fired | quiet <= alerts, f"unit tests of unknown alerts: {sorted((fired | quiet) - alerts)}"
    assert alerts - quiet == set(), (
        f"alerts with no unit test where they stay quiet: {sorted(alerts - quiet)}"
    )


def test_rules_are_well_formed() -> None:
    records = [r["record"] for g in rule_groups() for r in g["rules"] if "record" in r]
    assert len(records) == len(set(records)), "a recording rule is defined twice"
    for name in records:  # level:metric:operations
        assert re.fullmatch(r"[a-z_]+:compcap_[a-z0-9_]+:[a-z0-9_]+", name), name
    for name, rule in alert_rules().items():
        assert name.startswith("Compcap"), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name


def test_only_symptoms_page() -> None:
    severities = {name: rule["labels"]["severity"] for name, rule in alert_rules().items()}
    assert {name for name, severity in severities.items() if severity == "page"} == PAGES


def test_burn_rate_alerts_have_a_minimum_traffic_guard_and_a_short_window() -> None:
    burns = {name: rule for name, rule in alert_rules().items() if name.startswith("CompcapCaption")}
    assert len(burns) == 8, sorted(burns)
    for name, rule in burns.items():
        expr = " ".join(rule["expr"].split())
        assert re.search(r"namespace:compcap_caption_requests:rate\w+ \* \d+ >= 100$", expr), (name, expr)
        windows = re.findall(r"namespace:compcap_caption_requests_(?:errors|slow):ratio_rate(\w+)", expr)
        assert len(windows) == 2 and windows[0] == name.rsplit("Burn", 1)[1], (name, windows)
        assert "for" not in rule, f"{name}: the short window resets it, no `for`"


def test_dashboard_is_valid_and_templated() -> None:
    board = json.loads(DASHBOARD.read_text())
    all_panels = list(panels(board))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert set(variable_selectors(board)) == {"namespace", "model"}
    for name in ("namespace", "model"):
        assert variables[name]["datasource"]["uid"] == "${datasource}", name
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*", name
    for panel in all_panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    values = {"namespace": "ns", "model": "m", "__rate_interval": "1m", "k": "5"}
    for target in targets(board):  # every variable it uses is defined; every selector filters by namespace
        substitute(target.expr, values)
        for metric, matchers in selectors(target.expr):
            assert 'namespace=~"$namespace"' in matchers, f"{target.name}: {metric} not filtered by namespace"


def test_every_metric_the_rules_and_dashboard_read_is_exported() -> None:
    exported = gateway_metric_names() | TRITON_METRICS | TRITON_GPU_METRICS | {"up"}
    records = set(recording_rules())
    expressions = {f"rule {n}": e for n, e in recording_rules().items()}
    expressions |= {f"alert {n}": r["expr"] for n, r in alert_rules().items()}
    expressions |= {f"panel {t.name}": t.expr for t in targets(dashboard())}
    expressions |= {f"variable {n}": s for n, (s, _) in variable_selectors(dashboard()).items()}
    unknown = {
        where: sorted(names - exported - records)
        for where, expr in expressions.items()
        if (names := metric_names(expr)) - exported - records
    }
    assert not unknown, f"metrics neither the gateway nor Triton exports, nor a recording rule: {unknown}"
    read = set().union(*(metric_names(e) for e in expressions.values()))
    assert read & TRITON_METRICS, "no Triton panel"
    assert read >= TRITON_GPU_METRICS, f"GPU metrics no panel or alert reads: {TRITON_GPU_METRICS - read}"
    assert "compcap_build_info" in read, "no panel or alert reads compcap_build_info"
    assert "compcap_model_device_info" in read, "no panel shows the device each model runs on"


def test_backend_panels_match_the_shared_models_and_the_selected_captioners() -> None:
    """A panel filtering backend models by ``$model`` (a captioner) shows that captioner's own models
    and the shared ones (the visual encoder, every ranker's ``_image`` / ``_text``), and no other
    captioner's."""
    filtered = [t for t in targets(dashboard()) if "visual_encoder" in t.expr]
    assert filtered, "no panel filters backend models"
    for target in filtered:
        for selected, own in SERVED_MODELS.items():
            expr = substitute(target.expr, {"namespace": "ns", "model": selected, "__rate_interval": "1m"})
            for metric, matchers in selectors(expr):
                found = re.search(r'model=~"([^"]*)"', matchers)
                assert found, f"{target.name}: {metric} has no model filter"
                pattern = re.compile(found.group(1))
                others = [m for c, models in SERVED_MODELS.items() if c != selected for m in models]
                assert all(pattern.fullmatch(m) for m in own + SHARED_MODELS), (target.name, pattern.pattern)
                assert not any(pattern.fullmatch(m) for m in others), (target.name, pattern.pattern)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is absent (kustomize build check)")
def test_kustomization_provisions_the_rule_and_the_dashboard() -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    resources = {d["kind"]: d for d in yaml.safe_load_all(result.stdout)}
    assert set(resources) == {"PrometheusRule", "ConfigMap"}
    assert resources["PrometheusRule"]["spec"]["groups"] == rule_groups()
    config_map = resources["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["grafana-dashboard.json"]) == dashboard()
