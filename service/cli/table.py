"""The shape of a command table of ``compcap`` (the product) and ``compcap-lab`` (the research lab). Each
package owns its commands as a ``CommandTable`` (name → ``Command``) in a light module that imports only
the standard library (and this module) at top level; the package registers that table in the
entry-point group of its program in ``pyproject.toml`` (``compcap.commands``, ``compcap_lab.commands``),
and ``service.cli`` discovers it there, so the CLI names no package above ``service``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ENTRY_POINT_GROUP = "compcap.commands"  # the product's tables: compcap
LAB_ENTRY_POINT_GROUP = "compcap_lab.commands"  # the research lab's: compcap-lab


@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help, what adds its arguments, and what runs it (returns the exit
    code). Both functions import their heavy modules inside, so listing the commands stays cheap."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


CommandTable = Mapping[str, Command]
