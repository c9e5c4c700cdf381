"""The README and the documentation site: the README stays short; every shell and Python block of it
runs as written against a real ``compcap serve`` (on the tiny repository, which has probe sets, on an
OS-assigned port that replaces the README's 8080); its ``console`` blocks are the two set-up commands
and the import transcript, which CI itself runs (``make test``) or which need a snapshot; the site's
generated pages are written from the code by a MkDocs hook, so plain ``mkdocs build --strict`` passes
on a clean checkout with every connection but loopback refused, the built pages load nothing from the
internet and their links work from disk; no tracked file points at a path outside the repository."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import free_port, serving

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 200
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)

# a sitecustomize that refuses every connection but loopback, for the processes a test starts
REFUSE = """
import socket
_connect = socket.socket.connect
def connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1")) \\
            and self.family in (socket.AF_INET, socket.AF_INET6):
        raise OSError(f"network refused by the test: {address!r}")
    return _connect(self, address)
socket.socket.connect = connect
"""


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang == kind]


def offline_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "refuse"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REFUSE, encoding="utf-8")
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}


def test_the_readme_is_short_and_shows_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, len(lines)
    setup = blocks("console")
    assert any("make run" in b and "make test" in b for b in setup), setup
    assert {lang for lang, _ in BLOCK.findall(README.read_text(encoding="utf-8"))} <= {
        "sh",
        "python",
        "console",
    }
    for target in re.findall(r"\]\(((?:docs|reports)/[^)#]+)", README.read_text(encoding="utf-8")):
        assert (ROOT / target).is_file(), target


@pytest.fixture(scope="module")
def gateway(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_STATE_URL": ""}
    with serving(cmd, env, port, tmp_path_factory.mktemp("docs") / "serve.log") as url:
        yield url


@pytest.mark.parametrize("index", range(len(blocks("sh"))))
def test_every_readme_shell_block_runs(gateway: str, index: int) -> None:
    script = blocks("sh")[index].replace("http://127.0.0.1:8080", gateway)
    if "compcap " in script:
        pytest.fail("a README sh block runs compcap itself: make it a console transcript or test it here")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (script, done.stdout[-2000:], done.stderr[-2000:])
    assert done.stdout.strip(), script
    assert '"error"' not in done.stdout, done.stdout[-2000:]


def test_the_readme_python_example_runs(gateway: str) -> None:
    (code,) = blocks("python")
    done = subprocess.run(
        [sys.executable, "-c", code.replace("http://127.0.0.1:8080", gateway)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.strip().splitlines()) == 3, done.stdout


def clean_checkout(dest: Path) -> Path:
    """A copy of the checkout as a fresh clone has it: the files git tracks or would track (committed
    or not), none of the ignored ones (no ``docs/reference``, ``docs/assets`` or ``site``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():  # .venv and friends are links into another tree
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


LINK = re.compile(r"<(?:a|link|script|img)\b[^>]*\b(?:href|src)=\"([^\"]+)\"")


def broken_links(site: Path) -> list[str]:
    """Links of the built pages that would not open from disk: a relative target that is no file, or
    an anchor that the target page has no element for. ``404.html`` is left out: a web server serves it
    for any missing path, so its links are absolute."""
    ids: dict[Path, set[str]] = {}
    broken = []
    for page in sorted(p for p in site.rglob("*.html") if p.name != "404.html"):
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", target):  # http:, mailto:, data:, ...
                continue
            path, _, anchor = html.unescape(target).partition("#")
            file = (page.parent / path.split("?")[0]).resolve() if path else page
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file():
                broken.append(f"{page.relative_to(site)}: {target}")
            elif anchor and file.suffix == ".html":
                if file not in ids:
                    ids[file] = set(re.findall(r'\bid="([^"]+)"', file.read_text(encoding="utf-8")))
                if anchor not in ids[file]:
                    broken.append(f"{page.relative_to(site)}: {target}")
    return broken


def test_the_site_builds_strictly_offline_on_a_clean_checkout(tmp_path: Path) -> None:
    """Plain ``mkdocs build --strict`` on a checkout without any generated file: the hook writes the
    reference pages from the code; the pages load nothing from the internet and their links work from
    disk."""
    checkout = clean_checkout(tmp_path / "checkout")
    assert not (checkout / "docs" / "reference").exists()
    env = {**offline_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(tmp_path / "refuse"), str(checkout)])}
    site = tmp_path / "site"
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    built = subprocess.run(mkdocs, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "WARNING" not in built.stderr, built.stderr[-3000:]
    assert not (checkout / "docs" / "reference").exists()  # generated into the site, not into docs/
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 20
    settings = (site / "reference" / "settings.html").read_text(encoding="utf-8")
    assert "COMPCAP_MAX_BEAM_SIZE" in settings and "COMPCAP_LOG_FORMAT" in settings
    assert re.findall(r"PosixPath|pydantic\.|typing\.|Literal\[", settings) == []
    assert "compcap import" in (site / "reference" / "cli.html").read_text(encoding="utf-8")
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert "``" not in api and "Defaults:" in api  # the docstrings render as Markdown, not code blocks
    assert "Defaults:" not in "".join(re.findall(r"<pre.*?</pre>", api, re.S))
    assert (site / "reference" / "openapi.json").is_file() and (site / "assets" / "bench.png").is_file()
    loads = re.compile(r"<(?:script|img|link)\b[^>]*\b(?:src|href)=\"((?:https?:)?//[^\"]+)\"")
    external = {m for p in pages for m in loads.findall(p.read_text(encoding="utf-8"))}
    assert external == set(), external  # no script, stylesheet, font or image from the internet
    assert broken_links(site) == []
    assert "http.server" in (site / "index.html").read_text(encoding="utf-8")  # how to serve it for search


def test_the_generator_writes_the_pages_as_a_script(tmp_path: Path) -> None:
    env = offline_env(tmp_path)
    out = tmp_path / "pages"
    done = subprocess.run(
        [sys.executable, "scripts/gen_docs.py", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("settings.md", "cli.md", "hooks.md", "api.md", "openapi.json"):
        assert (out / "reference" / page).stat().st_size > 1000, page


def test_no_tracked_file_points_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "grep", "-l", "-E", r"\.\./shared|shared/DESIGN|shared/seeds", "--", ".", ":!*.lock"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert listed.stdout.split() == [
        p for p in listed.stdout.split() if p == "tests/integration/test_docs.py"
    ]
