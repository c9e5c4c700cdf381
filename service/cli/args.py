"""Argument types every ``compcap`` command shares (the ``type=`` of ``add_argument``), so that each value
is checked the same way while the command line is parsed, before any work. A refused value raises
``ArgumentTypeError`` saying what is wrong; argparse names the argument in front of it
(``compcap-lab world: argument --images: must be >= 1, got 0``). Also: ``ListAction`` (one spelling of a
list), ``add_renamed`` (a flag's old spelling kept, hidden) and the re-ranking vocabulary. Standard
library only at import: the command tables import it."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

ArgumentTypeError = argparse.ArgumentTypeError
N = TypeVar("N", int, float)

# -- numbers --------------------------------------------------------------------------------------


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _require(ok: bool, rule: str, got: object) -> None:
    """Refuse a value out of range: ``must be RULE, got GOT``."""
    if not ok:
        raise ArgumentTypeError(f"must be {rule}, got {got}")


def _checked(read: Callable[[str], N], rule: str, test: Callable[[N], bool], name: str) -> Callable[[str], N]:
    """An argument type: ``read`` the text, then refuse a value failing ``test`` (``must be RULE, got
    TEXT``)."""

    def parse(text: str) -> N:
        value = read(text)
        _require(test(value), rule, text)
        return value

    parse.__name__ = parse.__qualname__ = name
    return parse


positive_int = _checked(_int, ">= 1", lambda v: v >= 1, "positive_int")  # a count
non_negative_int = _checked(_int, ">= 0", lambda v: v >= 0, "non_negative_int")  # 0 usually turns it off
positive_float = _checked(_float, "> 0", lambda v: v > 0, "positive_float")  # seconds, a rate
non_negative_float = _checked(_float, ">= 0", lambda v: v >= 0, "non_negative_float")
fraction = _checked(_float, "in 0..1", lambda v: 0.0 <= v <= 1.0, "fraction")  # a share


def int_between(low: int, high: int) -> Callable[[str], int]:
    """A whole number in ``low..high``."""
    return _checked(_int, f"in {low}..{high}", lambda v: low <= v <= high, f"int_{low}_{high}")


def port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free port)."""
    return int_between(0, 65535)(text)


def held_out_groups() -> int:
    """How many held-out pair groups the concept inventory has (4: the groups of Nikolaus et al., 2019)."""
    from service.text.concepts import load_concepts

    return len(load_concepts().pair_groups)


def held_out_group(text: str) -> int:
    """A held-out pair group of the systematicity split, 1..``held_out_groups()``."""
    value = _int(text)
    groups = held_out_groups()
    if not 1 <= value <= groups:
        raise ArgumentTypeError(f"must be a held-out pair group in 1..{groups}, got {value}")
    return value


def one_of(*names: str) -> Callable[[str], str]:
    """One of ``names`` (for the items of a ``ListAction``, which argparse's ``choices`` cannot check)."""

    def parse(text: str) -> str:
        if text not in names:
            raise ArgumentTypeError(f"invalid choice {text!r} (choose from {', '.join(names)})")
        return text

    return parse


# -- paths ----------------------------------------------------------------------------------------
# each returns the text it was given: the commands make their own Path of it


def existing_dir(text: str) -> str:
    """A folder that is there and readable."""
    path = Path(text)
    if not path.exists():
        raise ArgumentTypeError(f"{text}: no such folder")
    if not path.is_dir():
        raise ArgumentTypeError(f"{text} is a file, not a folder")
    if not os.access(path, os.R_OK | os.X_OK):
        raise ArgumentTypeError(f"{text}: permission denied")
    return text


def existing_file(text: str) -> str:
    """A file that is there and readable."""
    path = Path(text)
    if not path.exists():
        raise ArgumentTypeError(f"{text}: no such file")
    if path.is_dir():
        raise ArgumentTypeError(f"{text} is a folder, not a file")
    if not os.access(path, os.R_OK):
        raise ArgumentTypeError(f"{text}: permission denied")
    return text


def writable_dir(text: str) -> str:
    """A folder the command may write into: there and writable, or one it can create (tried, then
    removed again, so that a refused command line leaves nothing behind)."""
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise ArgumentTypeError(f"{text} is a file, not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ArgumentTypeError(f"{text}: permission denied")
        return text
    missing = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise ArgumentTypeError(f"cannot create {text}: {(exc.strerror or str(exc)).lower()}") from None
    for created in missing:
        with contextlib.suppress(OSError):
            created.rmdir()
    return text


def writable_file(text: str) -> str:
    """A file the command may write (created or replaced): not a folder, in a folder it may write."""
    path = Path(text)
    if path.is_dir():
        raise ArgumentTypeError(f"{text} is a folder, not a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ArgumentTypeError(f"{text}: permission denied")
        return text
    writable_dir(str(path.parent))
    return text


# -- other values ---------------------------------------------------------------------------------


def url(text: str) -> str:
    """An http:// or https:// URL with a host (a gateway's base URL); returned without a trailing /."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        hint = f" (did you mean http://{text.strip()}?)" if "://" not in text else ""
        raise ArgumentTypeError(f"{text!r} is not an http:// or https:// URL{hint}")
    try:
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError:
        raise ArgumentTypeError(f"{text!r} has an invalid port") from None
    return text.strip().rstrip("/")


NO_RERANK = "none"  # the one spelling documented; false, off and no still mean the same
_NO_RERANK_ALIASES = (NO_RERANK, "false", "off", "no")
RERANK_HELP = "a ranker name, or 'none' for plain beam search (default: the captioner's own ranker)"


def rerank(text: str) -> str | bool | None:
    """``--rerank``: a ranker name; ``none`` (or false/off/no) for plain beam search → ``False``;
    ``default`` (or empty) for the captioner's own ranker → ``None``; ``true`` → ``True``."""
    word = text.strip()
    lowered = word.lower()
    if lowered in _NO_RERANK_ALIASES:
        return False
    if lowered in ("", "default"):
        return None
    if lowered == "true":
        return True
    return word


# -- lists and renamed flags ----------------------------------------------------------------------


class ListAction(argparse.Action):
    """One spelling of a list for every command: values after one flag, separated by spaces
    (``--clients 1 8 32``). The comma form (``--clients 1,8,32``, the old spelling) and a repeated flag
    (``--kind a --kind b``) give the same list. Each item goes through ``item`` (a type function);
    ``commas=False`` for items that may hold a comma (JSON). The first use replaces the default."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        item: Callable[[str], Any] = str,
        commas: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)
        self.item, self.commas = item, commas

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        tokens = [values] if isinstance(values, str) else list(values or [])
        for token in tokens:
            for part in token.split(",") if self.commas else [token]:
                if part.strip():
                    try:
                        items.append(self.item(part.strip()))
                    except (ArgumentTypeError, ValueError) as exc:
                        raise argparse.ArgumentError(self, str(exc)) from None
        if not items:
            raise argparse.ArgumentError(self, "expected at least one value")
        setattr(namespace, self.dest, items)


def add_renamed(parser: argparse.ArgumentParser | Any, new: str, old: str, **kwargs: Any) -> argparse.Action:
    """Add the flag ``new`` (``add_argument(new, **kwargs)``) and its old spelling ``old``, which parses
    the same into the same place but is not shown in ``--help`` (commands and scripts that use it still
    work). ``parser`` may be an argument group."""
    action: argparse.Action = parser.add_argument(new, **kwargs)
    parser.add_argument(old, **{**kwargs, "dest": action.dest, "help": argparse.SUPPRESS, "required": False})
    return action


__all__ = [
    "NO_RERANK",
    "RERANK_HELP",
    "ListAction",
    "add_renamed",
    "existing_dir",
    "existing_file",
    "fraction",
    "held_out_group",
    "held_out_groups",
    "int_between",
    "non_negative_float",
    "non_negative_int",
    "one_of",
    "port",
    "positive_float",
    "positive_int",
    "rerank",
    "url",
    "writable_dir",
    "writable_file",
]
