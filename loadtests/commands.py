"""The load tests' ``compcap`` command: bench. Light at import; ``loadtests.bench`` is imported only
when ``compcap bench`` is chosen."""

from __future__ import annotations

import argparse

from service.cli_table import Command, CommandTable


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from loadtests.bench import add_arguments

    add_arguments(parser)


def _bench(args: argparse.Namespace) -> int:
    from loadtests.bench import bench

    return bench(args)


COMMANDS: CommandTable = {
    "bench": Command("benchmark the engine and the gateway (loadtests/bench.py)", _bench_arguments, _bench),
}
