"""The load tests' ``compcap`` commands: bench, probe-load, shadow-load. Light at import; each command
imports its module only when it is chosen."""

from __future__ import annotations

import argparse

from service.cli_table import Command, CommandTable


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


def _probe_load_arguments(parser: argparse.ArgumentParser) -> None:
    from loadtests.load.probe_load import add_arguments

    add_arguments(parser)


def _probe_load(args: argparse.Namespace) -> int:
    from loadtests.load.probe_load import probe_load

    return probe_load(args)


def _shadow_load_arguments(parser: argparse.ArgumentParser) -> None:
    from loadtests.load.shadow_load import add_arguments

    add_arguments(parser)


def _shadow_load(args: argparse.Namespace) -> int:
    from loadtests.load.shadow_load import shadow_load

    return shadow_load(args)


COMMANDS: CommandTable = {
    "bench": Command(
        "benchmark the engine and the gateway (loadtests/bench/bench.py)", _bench_arguments, _bench
    ),
    "probe-load": Command(
        "caption latency with and without a live probe (loadtests/load/probe_load.py)",
        _probe_load_arguments,
        _probe_load,
    ),
    "shadow-load": Command(
        "caption latency with and without live shadow comparison (loadtests/load/shadow_load.py)",
        _shadow_load_arguments,
        _shadow_load,
    ),
}
