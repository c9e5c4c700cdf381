"""``docs/layout.md`` stays true to the tree: every package under ``service/``, ``export/``, ``loadtests/``
and ``client/`` (a folder with an ``__init__.py``, and the four roots) has one line of its own, a list
item that starts with its path (``- `export/quantize/` — …``); every path the page names in backticks
exists (a bare file name in a room's line is looked up in that room: ``app.py`` in the line of
``service/gateway/``), and so does every ``python -m`` module it names. Placeholders (``<model>/…``)
are not paths. The ``python -m`` modules the other docs and the load tests' own docstrings name must
exist as well, so a moved module cannot leave a command behind."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "layout.md"
ROOMS = ("service", "export", "sceneworld", "loadtests", "client", "lab")
PACKAGES = {
    "service": "service",
    "export": "export",
    "sceneworld": "sceneworld",
    "loadtests": "loadtests",
    "compcap_client": "client/compcap_client",
    "compcap_lab": "lab/compcap_lab",
}
ITEM = re.compile(r"^- `([\w./-]+/)`")
TOKEN = re.compile(r"`([^`]+)`")
PYTHON_M = re.compile(r"python -m ([A-Za-z_][\w.]*\w)")
PATH_LIKE = re.compile(r"[\w./-]+")
EXTENSIONS = {".py", ".json", ".md", ".pbtxt", ".onnx", ".npz", ".pt2", ".sh", ".toml", ".yaml", ".yml",
              ".txt", ".png", ".js", ".css", ".html", ".svg", ".lock"}  # fmt: skip


def packages(root: Path) -> set[str]:
    """Every room the page must name: the roots and each package below them, as ``path/``."""
    found = {f"{room}/" for room in ROOMS if (root / room).is_dir()}
    for room in ROOMS:
        for init in (root / room).rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            if not any(p.startswith(".") or p == "__pycache__" or p.endswith(".egg-info") for p in parts):
                found.add("/".join(parts) + "/")
    return found


def chunks(text: str) -> Iterator[tuple[str | None, str]]:
    """(room, text) of each list item of the page (room: the path it starts with, else None) and of each
    other paragraph (room None); a list item runs on over its indented lines."""
    room: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        item = ITEM.match(line)
        if item or not line.strip() or line.startswith(("#", "- ")) or (not line.startswith(" ") and room):
            if lines:
                yield room, "\n".join(lines)
            room, lines = (item.group(1) if item else None), ([line] if line.strip() else [])
        else:
            lines.append(line)
    if lines:
        yield room, "\n".join(lines)


def rooms_named(text: str) -> list[str]:
    return [room for room, _ in chunks(text) if room is not None]


def module_exists(root: Path, module: str) -> bool:
    """A module or package of this repository's packages (other modules, ``http.server``, are not ours)."""
    first, _, rest = module.partition(".")
    if first not in PACKAGES:
        return True
    base = root / PACKAGES[first] / Path(*rest.split(".")) if rest else root / PACKAGES[first]
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def is_path(token: str) -> bool:
    if "<" in token or not PATH_LIKE.fullmatch(token) or token.startswith(("/", "http")):
        return False
    return "/" in token or Path(token).suffix in EXTENSIONS


def missing_paths(root: Path, text: str) -> list[str]:
    """What the page names that the tree lacks: paths (looked up from the root, or in the item's room)
    and ``python -m`` modules."""
    missing = []
    for room, chunk in chunks(text):
        for token in TOKEN.findall(chunk):
            if is_path(token):
                where = [root / token] + ([root / room / token] if room else [])
                if not any(p.exists() for p in where):
                    missing.append(token)
            missing += [m for m in PYTHON_M.findall(token) if not module_exists(root, m)]
    return missing


def unnamed_packages(root: Path, text: str) -> list[str]:
    return sorted(packages(root) - set(rooms_named(text)))


def test_every_package_has_its_line() -> None:
    assert unnamed_packages(ROOT, PAGE.read_text(encoding="utf-8")) == []


def test_each_room_has_one_line() -> None:
    named = rooms_named(PAGE.read_text(encoding="utf-8"))
    assert sorted({r for r in named if named.count(r) > 1}) == []


def test_every_path_the_page_names_exists() -> None:
    assert missing_paths(ROOT, PAGE.read_text(encoding="utf-8")) == []


def _docs() -> Iterator[Path]:
    yield from sorted((ROOT / "docs").rglob("*.md"))
    yield from sorted(ROOT.glob("*.md"))
    yield from sorted((ROOT / "loadtests").rglob("*.py"))
    yield from sorted((ROOT / "lab").rglob("*.py"))
    yield ROOT / "Makefile"


@pytest.mark.parametrize("path", list(_docs()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_m_module_named_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert [m for m in PYTHON_M.findall(text) if not module_exists(ROOT, m)] == []


def _tree(root: Path, *files: str) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("", encoding="utf-8")
    return root


def test_a_package_without_a_line_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, "service/__init__.py", "service/api/__init__.py", "service/api/deps.py")
    page = "# Layout\n\n- `service/` — the root.\n- `service/api/` — the kit: `deps.py`.\n"
    assert unnamed_packages(root, page) == [] and missing_paths(root, page) == []
    _tree(root, "service/fresh/__init__.py", "service/fresh/__pycache__/x.py", "service/.hidden/__init__.py")
    assert unnamed_packages(root, page) == ["service/fresh/"]


def test_a_path_that_does_not_exist_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, "loadtests/__init__.py", "loadtests/bench/__init__.py", "loadtests/bench/plot.py")
    page = (
        "- `loadtests/` — figures.\n"
        "- `loadtests/bench/` — `plot.py` (`python -m loadtests.bench.plot`), `gone.py`,\n"
        "  `python -m loadtests.bench_plot`, `<model>/config.pbtxt`, `compcap bench`.\n"
        "\nSee `loadtests/peers/` and `python -m http.server`.\n"
    )
    assert missing_paths(root, page) == ["gone.py", "loadtests.bench_plot", "loadtests/peers/"]


def test_the_service_root_holds_at_most_six_loose_modules() -> None:
    """``service/``'s root keeps only what every room reads (the settings and their base, the model
    contract, metrics, logs, the numeric checks): each other module lives in the room that owns it."""
    loose = sorted(p.name for p in (ROOT / "service").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 6, loose
