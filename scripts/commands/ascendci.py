"""What the Ascend CI jobs ask of ci/ascend/: the image of a runner label or queue, the model, the band."""

from __future__ import annotations

import argparse
import sys

from scripts import ascendci
from scripts.e2e import config, preflight
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    image = sub.add_parser("image", help="the CI image (name@sha256:...) of a runner label or Buildkite queue")
    image.add_argument("system", choices=ascendci.SYSTEMS)
    image.add_argument("name", help="e.g. linux-aarch64-a2b3-4 (github) or ascend-a2b3 (buildkite)")
    sub.add_parser("model", help="the model's directory in the local Hugging Face cache (never downloads)")
    band = sub.add_parser("band", help="LO:HI for the chip of these cards (npu-smi), or the baseline band")
    band.add_argument("--cards", type=config.parse_cards, default=(0, 1, 2, 3), help="logical ids (default 0,1,2,3)")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    if args.what == "image":
        print(ascendci.image_for(ascendci.load(ws.ci_dir, ascendci.TARGETS), args.system, args.name))
    elif args.what == "model":
        print(ascendci.model_dir(ascendci.load(ws.ci_dir, ascendci.TARGETS)["model"]["repo"]))
    else:
        info = preflight.npu_smi_info()
        names = {logical: preflight.parse_npu_ids(info)[npu] for logical, npu in preflight.logical_cards(info).items()}
        chip = ascendci.chip_of(names, args.cards)
        band = ascendci.band_for(ascendci.load(ws.ci_dir, ascendci.BANDS), chip)
        if band is None:
            # stderr: the job reads the band from stdout
            print(f"kit: note: no band for {chip} in ci/{ascendci.BANDS}: this run is its baseline (median "
                  "recorded, not judged); add its steady median +-5 % there", file=sys.stderr)  # fmt: skip
        print(band or ascendci.BASELINE_BAND)
    return 0
