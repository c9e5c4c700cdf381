"""``compcap caption IMAGE…`` in process on the tiny repository and ``--url`` against a real gateway (the
same captions both ways); ``compcap serve`` on a busy port or without a repository says so in one line,
exit 2, before anything is loaded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from service.cli import main
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration


def _images(repo: Path, n: int) -> list[str]:
    return [str(p) for p in sorted((repo / "probes").rglob("*.png"))[:n]]


def _lines(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines())


def test_caption_in_process_and_on_a_gateway_agree(
    tiny_repo: Path, server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    images = _images(tiny_repo, 2)
    assert main(["caption", *images, "--repo", str(tiny_repo), "--beam-size", "3"]) == 0
    local = _lines(capsys.readouterr().out)
    assert list(local) == images and all(local.values())
    assert main(["caption", *images, "--url", server, "--beam-size", "3"]) == 0
    remote = _lines(capsys.readouterr().out)
    assert list(remote) == images and all(remote.values())
    for image in images:  # one image each way: the same batch, the same beams
        assert main(["caption", image, "--repo", str(tiny_repo), "--beam-size", "3"]) == 0
        assert _lines(capsys.readouterr().out)[image] == remote[image]


def test_caption_json_is_the_apis_answer_and_noise_is_flagged(
    tiny_repo: Path, server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json``: one API answer per image, the same in process and from a gateway; the plain form warns
    on stderr when an image is out of domain (uniform noise, on the calibrated shipped repository)."""
    image = _images(tiny_repo, 1)[0]
    assert main(["caption", image, "--repo", str(tiny_repo), "--beam-size", "3", "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["caption", image, "--url", server, "--beam-size", "3", "--json"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert local["results"][0]["captions"] == remote["results"][0]["captions"]
    assert local["beam_size"] == remote["beam_size"] == 3 and local["model"] == remote["model"]
    noise = tmp_path / "noise.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(noise)
    assert main(["caption", str(noise), "--repo", str(ROOT / "model_repo")]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"{noise}: ") and "warning" in out.err and "unlike the images" in out.err
    assert main(["caption", str(noise), "--repo", str(ROOT / "model_repo"), "--json"]) == 0
    flagged = json.loads(capsys.readouterr().out)["results"][0]
    assert flagged["in_domain"] is False and flagged["domain_score"] > 1


def test_caption_refusals_are_one_line(
    tiny_repo: Path, server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    image = _images(tiny_repo, 1)[0]
    cases = [
        (["caption", str(text), "--repo", str(tiny_repo)], "notes.txt is not an image"),
        (["caption", image, "--repo", str(tiny_repo), "--model", "nosuch"], "--model: "),
        (["caption", image, "--url", server, "--model", "nosuch"], "answered 404"),
        (["caption", image, "--repo", str(tmp_path)], "not a model repository"),
    ]
    for argv, named in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("compcap caption: ") and err.count("\n") == 1 and named in err, err


def _serve(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPCAP_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_on_a_busy_port_says_so_in_one_line(tiny_repo: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _serve(["--port", str(port), "--repo", str(tiny_repo)])
    assert result.returncode == 2
    assert result.stderr == f"compcap serve: port {port} on 127.0.0.1 is in use (--port to choose another)\n"


def test_serve_without_a_repository_points_at_repo(tmp_path: Path) -> None:
    result = _serve([], cwd=tmp_path)  # outside the checkout: no ./model_repo
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert (
        result.stderr.startswith("compcap serve: no model repository at model_repo")
        and "--repo" in result.stderr
    )
    (tmp_path / "model_repo").mkdir()  # there, but not built
    result = _serve([], cwd=tmp_path)
    assert result.returncode == 2 and "no manifest.json" in result.stderr and "--repo" in result.stderr
