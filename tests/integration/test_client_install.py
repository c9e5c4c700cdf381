"""The client alone: a new venv with nothing else, ``pip install ./client`` (the user's line, from a copy of
the checkout's tracked ``client/``; httpx and its dependencies come from the package index), on the oldest
Python it supports (3.9, skipped when absent) and on this one. Importing ``compcap_client`` loads httpx, its
dependencies and the standard library only — no fastapi, pydantic, numpy or ``service`` — and the client
captions on a running gateway what the gateway answers to a plain multipart post."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import copy_tracked, find_python

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "example_0.png"
# httpx and what it depends on (anyio's backports on older Pythons)
HTTPX = {
    "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio", "exceptiongroup", "typing_extensions",
}  # fmt: skip
NOT_LOADED = ("fastapi", "starlette", "pydantic", "numpy", "PIL", "service", "export", "uvicorn", "spacy")
# run in the client's venv: import it, caption with it, report what was loaded and from where
PROBE = """
import json, sys, sysconfig
from pathlib import Path
import compcap_client as c
imported = sorted(sys.modules)
with c.CompCapClient(sys.argv[1]) as client:
    caption = client.caption(sys.argv[2]).results[0].caption
    models = [m.name for m in client.models().captioners]
loaded = sorted(sys.modules)  # the import's modules and what the calls loaded after
stdlib = {Path(sysconfig.get_path(k)).resolve() for k in ("stdlib", "platstdlib")}
site = {Path(p).resolve() for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))}
where = {}
for name in loaded:
    path = getattr(sys.modules.get(name), "__file__", None)
    if path is None:
        where[name] = "builtin"
        continue
    path = Path(path).resolve()
    if any(s in path.parents for s in site):
        where[name] = "site"
    elif any(s in path.parents for s in stdlib):
        where[name] = "stdlib"
    else:
        where[name] = str(path)
out = {"where": where, "imported": imported, "caption": caption, "models": models, "file": c.__file__}
print(json.dumps(out))
"""


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """``cmd`` without this process's PYTHONPATH (the checkout would be importable) or venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    kw.setdefault("env", env)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]


@pytest.mark.parametrize("version", ["3.9", "current"])
def test_the_client_installs_alone_and_captions(version: str, server: str, tmp_path: Path) -> None:
    python = sys.executable if version == "current" else find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} here (python{version} on PATH or under ~/.pyenv/versions)")
    venv = tmp_path / "venv"
    made = run([python, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    py = str(venv / "bin" / "python")
    # what the bare venv loads at start-up already (setuptools' _distutils_hack on 3.11)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    bare = run([py, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"], cwd=tmp_path, env=env)
    baseline = {m.split(".")[0] for m in json.loads(bare.stdout)}
    checkout = copy_tracked(tmp_path / "checkout", ("client",))
    installed = run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "./client"], cwd=checkout
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    names = run([py, "-m", "pip", "list", "--format=json"])
    packages = {p["name"].lower().replace("_", "-") for p in json.loads(names.stdout)}
    assert packages - {"pip", "setuptools"} <= {p.replace("_", "-") for p in HTTPX} | {"compcap-client"}

    # from a folder without the checkout, so that only the installed package is importable
    probe = run([py, "-c", PROBE, server, str(EXAMPLE)], cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    out = json.loads(probe.stdout)
    assert Path(out["file"]).is_relative_to(venv)  # the installed package, not the checkout's
    where: dict[str, str] = out["where"]
    assert not [m for m in where if m.split(".")[0] in NOT_LOADED]
    third_party = {m.split(".")[0] for m, w in where.items() if w == "site"}
    at_import = {m.split(".")[0] for m in out["imported"] if where[m] == "site"}
    assert third_party <= HTTPX | {"compcap_client"} | baseline, third_party
    assert {"httpx", "compcap_client"} <= third_party
    elsewhere = {m: w for m, w in where.items() if w not in ("site", "stdlib", "builtin")}
    assert not elsewhere, elsewhere

    direct = httpx.post(
        f"{server}/v1/captions",
        files={"image": ("example_0.png", EXAMPLE.read_bytes(), "image/png")},
        timeout=30,
        trust_env=False,
    )
    assert direct.status_code == 200, direct.text
    assert out["caption"] == direct.json()["results"][0]["caption"]
    assert out["models"]
    print(
        f"\nclient on Python {version}: its import loads {sorted(at_import)}, two calls then "
        f"{sorted(third_party - at_import)}, besides the standard library"
    )
