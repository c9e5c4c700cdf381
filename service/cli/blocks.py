"""Argument blocks the ``compcap`` command tables share, each written once: a function adds one named
group of arguments (``repository``: ``--repo``; ``gateway_source``: ``--repo`` or ``--url``;
``ab_phases``: ``--clients --seconds --rounds``...) with its one type check and its one wording, and
takes only what really differs between commands (a default, what the help says a folder is for). The
tables of ``service``, ``export`` and ``loadtests`` import it; it imports only the standard library and
``service.cli.args``, so listing the commands stays light.

The blocks add plain arguments, not argparse argument groups: ``--help`` lists each command's flags in
the order its table adds them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from service.cli.args import (
    RERANK_HELP,
    ListAction,
    add_renamed,
    existing_dir,
    held_out_group,
    non_negative_float,
    positive_float,
    positive_int,
    rerank,
    url,
    writable_dir,
    writable_file,
)

Parser = argparse.ArgumentParser | Any  # a parser, an argument group or a mutually exclusive group

# -- where the models are ---------------------------------------------------------------------------


def repository(
    parser: Parser,
    help: str = "the model repository",
    *,
    default: str | Path | None = "model_repo",
    required: bool = False,
) -> argparse.Action:
    """``--repo DIR``: a model repository that is there (a required one has no default)."""
    default = None if required else default
    action: argparse.Action = parser.add_argument(
        "--repo", type=existing_dir, default=default, required=required, help=help
    )
    return action


def zoo_repository(
    parser: Parser, help: str = "the model zoo (compcap-lab models)", default: str | Path = "model_zoo"
) -> argparse.Action:
    """``--repo DIR`` of the studies, a zoo by default (their old spelling ``--zoo`` still works)."""
    return add_renamed(parser, "--repo", "--zoo", type=existing_dir, default=default, help=help)


def gateway_url(parser: Parser, help: str, *, required: bool = False) -> argparse.Action:
    """``--url URL``: a running gateway (``compcap serve``)."""
    action: argparse.Action = parser.add_argument(
        "--url", type=url, default=None, required=required, help=help
    )
    return action


def gateway_source(
    parser: argparse.ArgumentParser, repo_help: str, url_help: str, *, required: bool = False
) -> None:
    """``--repo DIR`` (decode in process) or ``--url URL`` (a gateway), not both."""
    source = parser.add_mutually_exclusive_group(required=required)
    repository(source, repo_help, default=None)
    gateway_url(source, url_help)


def api_key(parser: Parser, *, with_url: bool = False) -> None:
    """``--api-key KEY`` for a gateway that asks for one (default: ``COMPCAP_API_KEY``)."""
    when = "with --url: " if with_url else ""
    parser.add_argument(
        "--api-key",
        default=os.environ.get("COMPCAP_API_KEY"),
        help=f"{when}sent as 'Authorization: Bearer KEY' (default: COMPCAP_API_KEY)",
    )


# -- what is decoded --------------------------------------------------------------------------------


def captioner(parser: Parser, default: str = "the repository's default", who: str = "captioner") -> None:
    """``--model NAME``: one captioner (``default`` says whose default is taken without it)."""
    parser.add_argument("--model", default=None, help=f"{who} (default: {default})")


def beam_size(parser: Parser, help: str, default: int | None = None) -> None:
    """``--beam-size N``."""
    parser.add_argument("--beam-size", type=positive_int, default=default, help=help)


def reranking(parser: Parser) -> None:
    """``--rerank RANKER`` (``none``: plain beam search)."""
    parser.add_argument("--rerank", type=rerank, default=None, help=RERANK_HELP)


def rerank_weight(parser: Parser, default: float | None, default_said: str) -> None:
    """``--rerank-weight W`` of a re-ranked run (``default_said``: how the help names the default)."""
    parser.add_argument(
        "--rerank-weight",
        type=non_negative_float,
        default=default,
        help=f"re-ranked order = cosine + weight × normalised log-prob ({default_said})",
    )


# -- lists ----------------------------------------------------------------------------------------


def value_list(
    parser: Parser,
    flag: str,
    metavar: str,
    help: str,
    *,
    default: Sequence[Any] | None = None,
    item: Callable[[str], Any] = str,
) -> argparse.Action:
    """``FLAG A B C`` (``A,B,C`` and a repeated flag alike, ``ListAction``): a list, each item checked by
    ``item``."""
    action: argparse.Action = parser.add_argument(
        flag, action=ListAction, item=item, default=default, metavar=metavar, help=help
    )
    return action


def counts(parser: Parser, flag: str, help: str, default: Sequence[int] | None = None) -> argparse.Action:
    """``FLAG N N N``: a list of counts (each >= 1)."""
    return value_list(parser, flag, "N", help, default=default, item=positive_int)


# -- data and what is written -----------------------------------------------------------------------


def dataset(parser: Parser, help: str, *, required: bool = False, flag: str = "--data") -> None:
    """``--data DIR`` (or another ``flag``): a dataset folder that is there."""
    parser.add_argument(flag, type=existing_dir, default=None, required=required, help=help)


def images(parser: Parser, help: str, default: int | None = None) -> None:
    """``--images N``: how many images."""
    parser.add_argument("--images", type=positive_int, default=default, help=help)


def seed(parser: Parser, help: str, default: int | None = 0) -> None:
    """``--seed N``."""
    parser.add_argument("--seed", type=int, default=default, help=help)


def work_folder(parser: Parser, help: str) -> None:
    """``--work DIR``: a folder for intermediate files (created)."""
    parser.add_argument("--work", type=writable_dir, default=None, help=help)


def report_folder(parser: Parser, help: str = "folder of the report", default: str = "reports") -> None:
    """``--out DIR``: the folder a study writes its report into (created)."""
    parser.add_argument("--out", type=writable_dir, default=default, help=help)


def json_output(parser: Parser, what: str = "the result") -> None:
    """``--json FILE``: also write ``what`` as JSON here."""
    parser.add_argument("--json", type=writable_file, default=None, help=f"write {what} here")


def no_meteor(parser: Parser) -> None:
    """``--no-meteor``: skip METEOR."""
    parser.add_argument("--no-meteor", action="store_true", help="skip METEOR (a Java start per run)")


# -- splits -----------------------------------------------------------------------------------------


SPLIT_KINDS = ("systematicity", "productivity", "substitutivity", "full")


def split_kind(parser: Parser, flag: str, help: str) -> None:
    """``flag`` (``--kind``, ``--split``): which compositional split, one of ``SPLIT_KINDS`` (required)."""
    parser.add_argument(flag, required=True, choices=SPLIT_KINDS, help=help)


def require_group(kind: str, group: int | None, flag: str) -> None:
    """A systematicity split needs its held-out pair group (``UsageError`` naming ``flag`` otherwise)."""
    if kind == "systematicity" and group is None:
        from service.cli.args import held_out_groups
        from service.cli.errors import UsageError

        raise UsageError(
            f"--group is required for {flag} systematicity: the held-out pair group, 1..{held_out_groups()}"
        )


def held_out_group_choice(parser: Parser, required_for: str) -> None:
    """``--group N``: the held-out pair group of a systematicity split (``required_for``: when)."""
    parser.add_argument(
        "--group",
        type=held_out_group,
        default=None,
        help=f"held-out pair group, 1..4 (required for {required_for})",
    )


def productivity_measure(parser: Parser) -> None:
    """``--by length|density``: the productivity split's measure."""
    parser.add_argument("--by", default="length", choices=["length", "density"], help="productivity measure")


def build_sizes(parser: Parser, presets: Sequence[str], out_default: str, out_help: str) -> None:
    """``--preset --out --seed --work`` of a build: what it writes, with which sizes and seed."""
    parser.add_argument("--preset", choices=presets, default="default", help="data, model and training sizes")
    parser.add_argument("--out", type=writable_dir, default=out_default, help=out_help)
    seed(parser, "seed of the world and the training")
    work_folder(parser, "folder for data and checkpoints (default: <out>.work)")


# -- load phases ------------------------------------------------------------------------------------


def ab_phases(parser: Parser) -> None:
    """``--clients N --seconds S --rounds N``: A/B load phases (without, then with, what is measured)."""
    parser.add_argument("--clients", type=positive_int, default=8, help="closed-loop caption clients")
    add_renamed(
        parser, "--seconds", "--duration", type=positive_float, default=20.0, help="length of each phase"
    )
    parser.add_argument("--rounds", type=positive_int, default=2, help="A/B pairs")


__all__ = [
    "ab_phases",
    "api_key",
    "beam_size",
    "build_sizes",
    "captioner",
    "counts",
    "dataset",
    "gateway_source",
    "gateway_url",
    "held_out_group_choice",
    "images",
    "json_output",
    "no_meteor",
    "productivity_measure",
    "report_folder",
    "repository",
    "rerank_weight",
    "reranking",
    "seed",
    "value_list",
    "work_folder",
]
