"""``python -m compcap_lab.snapshots KIND OUT``: write a random-weight snapshot (nothing downloaded) and
print what it is as one JSON line. ``--size``: ``real`` (the default where the architecture has it:
vit-gpt2, blip) or ``tiny`` (the tests'; git and clip have only it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compcap_lab.snapshots import blip, clip, git, vit_gpt2

ARCHITECTURES = {"vit-gpt2": vit_gpt2, "blip": blip, "git": git, "clip": clip}
WITH_MAX_LENGTH = ("vit-gpt2", "git")  # the architectures whose snapshots set generate's max_length


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compcap_lab.snapshots",
        description="write a random-weight snapshot (nothing downloaded): vit-gpt2 (nlpconnect/vit-gpt2-"
        "image-captioning's size) and blip (Salesforce/blip-image-captioning-base's) at real size unless "
        "--size tiny; git and clip tiny",
    )
    parser.add_argument("kind", choices=tuple(ARCHITECTURES))
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--size", choices=("tiny", "real"), help="default: real where the kind has it, else tiny"
    )
    parser.add_argument(
        "--max-length", type=int, help="vit-gpt2, git: generate's max_length (default: the size's; real 16)"
    )
    args = parser.parse_args(argv)
    module = ARCHITECTURES[args.kind]
    size = args.size or ("real" if "real" in module.SIZES else "tiny")
    if size not in module.SIZES:
        parser.error(f"{args.kind} has no {size} size (it has: {', '.join(module.SIZES)})")
    options = {}
    if args.max_length is not None:
        if args.kind not in WITH_MAX_LENGTH:
            parser.error(f"--max-length: {args.kind}'s snapshots set no generation settings")
        options["max_length"] = args.max_length
    out = module.build(args.out, size, **options)
    print(json.dumps({"kind": args.kind, "size": size, **module.describe(out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
