"""The load studies' ``compcap-lab`` commands: probe-load, shadow-load. Light at import; each command
imports its module only when it is chosen."""

from __future__ import annotations

import argparse

from service.cli.table import Command, CommandTable


def _probe_load_arguments(parser: argparse.ArgumentParser) -> None:
    from compcap_lab.load.probe_load import add_arguments

    add_arguments(parser)


def _probe_load(args: argparse.Namespace) -> int:
    from compcap_lab.load.probe_load import probe_load

    return probe_load(args)


def _shadow_load_arguments(parser: argparse.ArgumentParser) -> None:
    from compcap_lab.load.shadow_load import add_arguments

    add_arguments(parser)


def _shadow_load(args: argparse.Namespace) -> int:
    from compcap_lab.load.shadow_load import shadow_load

    return shadow_load(args)


COMMANDS: CommandTable = {
    "probe-load": Command(
        "caption latency with and without a live probe (lab/compcap_lab/load/probe_load.py)",
        _probe_load_arguments,
        _probe_load,
    ),
    "shadow-load": Command(
        "caption latency with and without live shadow comparison (lab/compcap_lab/load/shadow_load.py)",
        _shadow_load_arguments,
        _shadow_load,
    ),
}
