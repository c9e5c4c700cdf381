"""``compcap-lab``: the research lab's command line (SceneWorld, training, the model zoo, the reproduction
studies and their reports, the load studies), ``service.cli``'s machinery over the tables of the
``compcap_lab.commands`` entry-point group (``pyproject.toml``). ``python -m compcap_lab.cli`` runs it as
well. A product command given here is one line pointing at ``compcap``, and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from service import cli
from service.cli.table import LAB_ENTRY_POINT_GROUP

LAB = cli.Program(
    name="compcap-lab",
    description="CompCap's research lab: SceneWorld data, training, the model zoo, the reproduction studies "
    "and their reports, the load studies (`compcap-lab COMMAND --help` for a command's options; serving, "
    "captioning and probing are compcap's).",
    group=LAB_ENTRY_POINT_GROUP,
    elsewhere=(cli.Neighbour(cli.PRODUCT.name, cli.PRODUCT.group, "a product command", cli.PRODUCT.builtin),),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``compcap-lab`` on ``argv`` (default: ``sys.argv[1:]``), as ``service.cli.main`` runs
    ``compcap``."""
    return cli.main(argv, LAB)


if __name__ == "__main__":
    sys.exit(main())
