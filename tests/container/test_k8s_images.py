"""The Kubernetes overlays with the images just built, pinned by digest: each overlay is rendered with a
kustomization on top that sets ``images:`` to the built gateway and probe-set images by their digests
(as a release sets them to what it pushed, k8s/README.md "Images"), validated as ``tests/ops/test_k8s.py``
validates the overlays (``kubernetes-validate --strict``, every image pinned), and every rendered
reference resolves to the built image in podman's storage. The GPU overlay takes the GPU variant only
where the tier built it (``tests/container/test_variants.py``)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.container.tier import GPU, PROBESETS, SERVE, TRITON, Run

pytestmark = pytest.mark.container

OVERLAY_IMAGE = {
    "embedded": SERVE,
    "embedded-gpu": GPU,
    "triton-gpu": TRITON,
    "triton-gpu-shm": TRITON,
}


def pinned(run: Run, ref: str) -> tuple[str, str]:
    """(name, digest) of a built image."""
    digest = run.image(ref)["Digest"]
    assert digest.startswith("sha256:"), digest
    return ref.rsplit(":", 1)[0], digest


@pytest.mark.parametrize("overlay", list(OVERLAY_IMAGE))
def test_the_overlay_renders_and_validates_with_the_built_images_by_digest(
    run: Run, serve_image: str, triton_image: str, probesets_image: str, overlay: str
) -> None:
    from tests.ops.test_k8s import (
        ROOT,
        all_containers,
        find_tool,
        gateway_container,
        image_pinned,
        immutable_tags,
        pod_spec,
        render_dir,
    )

    if not run.image_exists(OVERLAY_IMAGE[overlay]):
        pytest.skip(f"{OVERLAY_IMAGE[overlay]} was not built in this run (tests/container/test_variants.py)")
    gateway_name, gateway_digest = pinned(run, OVERLAY_IMAGE[overlay])
    probesets_name, probesets_digest = pinned(run, PROBESETS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(ROOT / "k8s" / "overlays" / overlay, folder)],
            "images": [
                {"name": "compcap-gateway", "newName": gateway_name, "digest": gateway_digest},
                {"name": "compcap-probesets", "newName": probesets_name, "digest": probesets_digest},
            ],
        }
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        rendered = render_dir(folder, f"{overlay}@digests")

    validate = subprocess.run(
        [find_tool("kubernetes-validate"), "--strict", "-"],
        input=rendered.text,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert validate.returncode == 0 and "ERROR" not in validate.stdout, validate.stdout + validate.stderr
    gateway_ref = f"{gateway_name}@{gateway_digest}"
    assert gateway_container(rendered)["image"] == gateway_ref
    refs = set()
    for workload in rendered.workloads():
        for c in all_containers(pod_spec(workload)):
            assert image_pinned(c["image"], immutable_tags()) is None, c["image"]
            if c["image"].startswith("localhost/"):
                refs.add(c["image"])
    assert refs == {gateway_ref, f"{probesets_name}@{probesets_digest}"}, refs
    built = {gateway_ref: OVERLAY_IMAGE[overlay], f"{probesets_name}@{probesets_digest}": PROBESETS}
    for ref, tag in built.items():  # the rendered references are the images podman holds
        assert run.image(ref)["Id"] == run.image(tag)["Id"]
