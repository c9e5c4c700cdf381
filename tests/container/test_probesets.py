"""The probe-set image (``k8s/components/probesets/Dockerfile``, on the local base: its base is a build
argument) feeds the gateway's repository as the embedded overlay's pod does: its two init containers
(their commands, mounts and security context as ``kubectl kustomize k8s/overlays/embedded`` renders
them) run in order on emptyDir-like folders, then the gateway serves the staged repository read-only
and a live probe on it succeeds. The sets are built by the image's own ``compcap probesets`` (one kind,
the tiny sizes: seconds)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.container.tier import Run, started

pytestmark = pytest.mark.container

SECURE = ("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")


def mounts(container: dict[str, Any], volumes: dict[str, Path]) -> list[str]:
    """``-v`` options for a rendered container's volumeMounts, each volume a host folder."""
    out = []
    for mount in container.get("volumeMounts", []):
        ro = ":ro" if mount.get("readOnly") else ""
        out += ["-v", f"{volumes[mount['name']]}:{mount['mountPath']}{ro}"]
    return out


def user(spec: dict[str, Any]) -> list[str]:
    context = spec.get("securityContext", {})
    return ["--user", f"{context['runAsUser']}:{context['runAsGroup']}"]


def test_the_probe_set_image_feeds_the_gateway_and_a_probe_runs(
    run: Run, serve_image: str, probesets_image: str, tmp_path: Path
) -> None:
    from tests.ops.test_k8s import env_of, pod_spec, render

    probesets = probesets_image

    spec = pod_spec(render("embedded").get("Deployment", "compcap-gateway"))
    volumes = {}
    for volume in spec["volumes"]:
        assert "emptyDir" in volume, volume
        volumes[volume["name"]] = tmp_path / "volumes" / volume["name"]
        volumes[volume["name"]].mkdir(parents=True)
        volumes[volume["name"]].chmod(0o1777)  # an emptyDir is writable by the pod's user
    images = {"compcap-probesets": probesets, "compcap-gateway": serve_image}
    for init in spec["initContainers"]:
        image = images[init["image"].split(":")[0]]
        out = run(
            "run", "--rm", *SECURE, *user(spec), *mounts(init, volumes), "--entrypoint", init["command"][0],
            image, *init["command"][1:], *init.get("args", []),
        )  # fmt: skip
        print(f"{init['name']}: {out.strip()}")
    assert (volumes["models"] / "probes").is_dir()

    (gateway,) = [c for c in spec["containers"] if c["name"] == "gateway"]
    key = secrets.token_hex(16)
    env = [f"{k}={v}" for k, v in env_of(gateway).items()]
    env += [f"COMPCAP_API_KEYS={key}", "COMPCAP_STATE_URL=sqlite:////tmp/compcap_state.db"]  # the Secrets
    args = [a for e in env for a in ("-e", e)]
    with started(run, serve_image, *SECURE, *user(spec), *mounts(gateway, volumes), *args) as c:
        c.wait_ready()
        headers = {"Authorization": f"Bearer {key}"}
        body = {"kind": "systematicity", "model": "butr", "beam_size": 3, "images": 2}
        r = httpx.post(f"{c.url}/v1/probes", json=body, headers=headers, timeout=30, trust_env=False)
        assert r.status_code in (200, 201, 202), r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 300
        while True:
            r = httpx.get(f"{c.url}/v1/probes/{job}", headers=headers, timeout=30, trust_env=False)
            status = r.json().get("status")
            if status not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.5)
        assert status == "succeeded", r.text
        assert r.json()["summary"], r.text
