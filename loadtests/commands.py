"""The load tests' ``compcap`` command: bench (an operator's). The load studies (probe-load, shadow-load)
are the lab's, ``compcap_lab.commands.load``. Light at import; each command imports its module only when it
is chosen."""

from __future__ import annotations

import argparse

from service.cli.table import Command, CommandTable


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from loadtests.bench.bench import add_arguments
    from loadtests.bench.mix import add_arguments as add_mix_arguments
    from loadtests.bench.profile import add_arguments as add_profile_arguments

    add_arguments(parser)
    add_mix_arguments(parser)
    add_profile_arguments(parser)


def _bench(args: argparse.Namespace) -> int:
    if args.mix:
        from loadtests.bench.mix import mix

        return mix(args)
    if args.profile:
        from loadtests.bench.profile import profile

        return profile(args)
    from loadtests.bench.bench import bench

    return bench(args)


COMMANDS: CommandTable = {
    "bench": Command(
        "benchmark the engine and the gateway (loadtests/bench/bench.py)", _bench_arguments, _bench
    ),
}
