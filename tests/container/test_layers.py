"""No stale layer: a code change reaches the rebuilt image (buildah 1.28 reused the cached layer of a
``RUN --mount=type=bind,from=wheel`` step after the code changed; the Dockerfile copies the installed
wheel with ``COPY --from`` instead), and the rebuild reuses every layer below the code."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

from tests.container.tier import FIGURES, Run

pytestmark = pytest.mark.container


def test_a_code_change_reaches_the_rebuilt_image_and_only_the_code_layer_changes(
    run: Run, serve_image: str, context: Path, tmp_path: Path
) -> None:
    edited = tmp_path / "context"
    shutil.copytree(context, edited)
    module = edited / "service" / "__init__.py"
    original = module.read_text(encoding="utf-8")
    first = run.image(serve_image)["RootFS"]["Layers"]
    marker = uuid.uuid4().hex
    module.write_text(original + f'\n__build_marker__ = "{marker}"\n', encoding="utf-8")
    start = time.monotonic()
    image = run.build("--tag", "localhost/compcap-gateway:tier-edit", context=edited)
    FIGURES["rebuild_s"] = time.monotonic() - start
    read = "import service; print(service.__build_marker__)"
    out = run("run", "--rm", "--entrypoint", "python", image, "-c", read)
    assert out.strip() == marker, "the image kept the code of the first build"
    layers = run.image(image)["RootFS"]["Layers"]
    assert len(layers) == len(first) and layers[:-1] == first[:-1], "a layer below the code was rebuilt"
    assert layers[-1] != first[-1], "the code layer was reused"
