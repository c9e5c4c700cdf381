"""The monitoring files of ``k8s/monitoring`` as data (rules from the ``PrometheusRule``'s spec.groups,
the Grafana dashboard's panel and variable expressions) and ``LocalPrometheus``: Debian's
``/usr/bin/prometheus`` on an OS-assigned 127.0.0.1 port with a scrape config and those rules, always
terminated. Shared by tests/ops/test_monitoring.py and tests/integration/test_prometheus.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "k8s" / "monitoring"
RULE_RESOURCE = MONITORING / "prometheus-rule.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULE_TESTS = MONITORING / "tests"
RULES_FILE_NAME = "compcap-rules.yaml"  # what the promtool unit tests name in rule_files
PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")

# Triton metrics the dashboard and rules may use: what a real tritonserver (the pytriton wheel's, run
# by service/tritonlocal on CPU) exposes per model on its metrics port, GPU and cache metrics aside.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_pending_request_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    }
)

# GPU metrics of Triton's (docs/user_guide/metrics.md): exported only where Triton sees a GPU, so a CPU
# Triton (these machines) cannot show them; the GPU panels and alerts are checked by promtool tests only
TRITON_GPU_METRICS = frozenset(
    {"nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"}
)


# --- rules -----------------------------------------------------------------------------------------


def rule_groups() -> list[dict[str, Any]]:
    """spec.groups of the ``PrometheusRule``: the single source of the recording rules and alerts."""
    resource = yaml.safe_load(RULE_RESOURCE.read_text())
    assert resource["kind"] == "PrometheusRule", resource["kind"]
    return list(resource["spec"]["groups"])


def write_rules_file(path: Path) -> Path:
    """A plain Prometheus rules file (``groups:``) of the ``PrometheusRule``'s spec.groups."""
    path.write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))
    return path


def recording_rules() -> dict[str, str]:
    """Recorded name → expression."""
    return {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"] if "record" in r}


def alert_rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


# --- dashboard -------------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels of collapsed rows included."""
    for panel in board.get("panels", []):
        yield panel
        yield from panels(panel)


@dataclass(frozen=True)
class Target:
    panel: str
    ref: str
    expr: str

    @property
    def name(self) -> str:
        return f"{self.panel} [{self.ref}]"


def targets(board: Mapping[str, Any]) -> list[Target]:
    return [
        Target(str(p.get("title")), str(t.get("refId")), str(t.get("expr", "")))
        for p in panels(board)
        for t in p.get("targets", [])
    ]


def variable_selectors(board: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Query variable → (series selector, label) of its ``label_values(selector, label)``."""
    out = {}
    for var in board["templating"]["list"]:
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
        assert found, f"variable {var['name']}: not a label_values(selector, label) query: {query}"
        out[var["name"]] = (found.group(1), found.group(2))
    return out


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with Grafana's ``$var`` / ``${var}`` replaced; ``KeyError`` for a variable not in
    ``values``."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(one, expr)


# --- metric names in PromQL ------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)")


def metric_names(expr: str) -> set[str]:
    """Names in ``expr`` that are metrics: ``compcap_*``, ``nv_*``, ``up`` and recorded names
    (``level:metric:operations``); functions, keywords and label names do not match those."""
    code = _STRING.sub('""', expr)
    names = set()
    for match in _IDENT.finditer(code):
        name = match.group(1)
        if ":" in name or name.startswith(("compcap_", "nv_")) or name == "up":
            names.add(name)
    return names


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, matchers inside its braces, '' when none) for every metric in ``expr``."""
    out = []
    code = _STRING.sub(lambda m: "\0" * len(m.group(0)), expr)
    for match in _IDENT.finditer(code):
        name = match.group(1)
        if not (":" in name or name.startswith(("compcap_", "nv_")) or name == "up"):
            continue
        matchers = ""
        if code.startswith("{", match.end()):
            matchers = expr[match.end() + 1 : code.index("}", match.end())]
        out.append((name, matchers))
    return out


# --- a real Prometheus -----------------------------------------------------------------------------


class PrometheusError(RuntimeError):
    pass


class LocalPrometheus:
    """``prometheus`` on 127.0.0.1:``port`` (0: a free one), scraping ``jobs`` (job name → (targets,
    static labels)) every ``interval`` and evaluating ``rule_files`` as often. Use as a context
    manager; the process is always terminated."""

    def __init__(
        self,
        work: Path,
        jobs: Mapping[str, tuple[list[str], Mapping[str, str]]],
        rule_files: list[Path],
        interval: str = "1s",
        binary: Path = PROMETHEUS,
    ) -> None:
        self.work = work
        self.binary = binary
        self.config = work / "prometheus.yml"
        self.log_path = work / "prometheus.log"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": interval,
                        "scrape_timeout": interval,
                        "evaluation_interval": interval,
                    },
                    "rule_files": [str(p) for p in rule_files],
                    "scrape_configs": [
                        {
                            "job_name": job,
                            "static_configs": [{"targets": list(hosts), "labels": dict(labels)}],
                        }
                        for job, (hosts, labels) in jobs.items()
                    ],
                },
                sort_keys=False,
            )
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.is_file() else ""

    def start(self, timeout: float = 60.0) -> LocalPrometheus:
        from tests.integration.conftest import free_port

        for _attempt in range(3):  # a free port taken by someone else meanwhile: try another
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            with self.log_path.open("wb") as log:
                process = self.process = subprocess.Popen(
                    [
                        str(self.binary),
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={self.work / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    cwd=self.work,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + timeout
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    if httpx.get(f"{self.url}/-/ready", timeout=1.0, trust_env=False).is_success:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            if process.poll() is None:
                self.stop()
                raise PrometheusError(f"prometheus not ready in {timeout:.0f} s:\n{self.log_tail()}")
            if "address already in use" not in self.log_tail().lower():
                break
        raise PrometheusError(f"prometheus exited with {process.returncode}:\n{self.log_tail()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10.0, trust_env=False)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (a scalar result becomes one series)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def targets_up(self) -> dict[str, bool]:
        """Scrape job → whether every target of it is up."""
        jobs: dict[str, bool] = {}
        for target in self.api("targets")["activeTargets"]:
            job = target["labels"]["job"]
            jobs[job] = jobs.get(job, True) and target["health"] == "up"
        return jobs
