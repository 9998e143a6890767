"""What the Ascend CI jobs ask of ci/ascend/: the image of a runner label or queue, the model, the
band, the hold."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scripts import ascendci
from scripts.e2e import config, preflight
from scripts.pin import load_pin
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    image = sub.add_parser(
        "image", help="the CI image (name@sha256:...) of a runner label or Buildkite queue"
    )
    image.add_argument("system", choices=ascendci.SYSTEMS)
    image.add_argument("name", help="e.g. linux-aarch64-a2b3-4 (github) or ascend-a2b3 (buildkite)")
    model = sub.add_parser(
        "model", help="the model's directory in the pool's cache (never downloads)"
    )
    model.add_argument(
        "--model-dir",
        default=os.environ.get("KIT_ASCEND_MODEL_DIR") or None,
        help="the model's directory, the only place looked at (default: KIT_ASCEND_MODEL_DIR)",
    )
    band = sub.add_parser(
        "band", help="LO:HI for the chip of these cards (npu-smi), or the baseline band"
    )
    band.add_argument(
        "--cards",
        type=config.parse_cards,
        default=(0, 1, 2, 3),
        help="logical ids (default 0,1,2,3)",
    )
    held = sub.add_parser(
        "held", help="pip constraints holding the image's stack (ci/ascend/Dockerfile)"
    )
    held.add_argument(
        "--path", action="append", help="a site-packages folder to read (default: this python's)"
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    if args.what == "image":
        print(
            ascendci.image_for(ascendci.load(ws.ci_dir, ascendci.TARGETS), args.system, args.name)
        )
    elif args.what == "model":
        repo = ascendci.load(ws.ci_dir, ascendci.TARGETS)["model"]["repo"]
        homes = [Path(os.environ["HOME"])] if os.environ.get("HOME") else []
        places = ascendci.model_places(
            repo, os.environ, [*homes, ascendci.POOL_HOME], args.model_dir
        )
        print(ascendci.find_model(repo, places))
    elif args.what == "held":
        installed = ascendci.installed_versions(args.path)
        print("\n".join(ascendci.held_constraints(installed, load_pin(ws.pin_file).version)))
    else:
        info = preflight.npu_smi_info()
        names = {
            logical: preflight.parse_npu_ids(info)[npu]
            for logical, npu in preflight.logical_cards(info).items()
        }
        chip = ascendci.chip_of(names, args.cards)
        band = ascendci.band_for(ascendci.load(ws.ci_dir, ascendci.BANDS), chip)
        if band is None:
            # stderr: the job reads the band from stdout
            print(
                f"kit: note: no band for {chip} in ci/{ascendci.BANDS}: this run is its baseline "
                "(median "
                "recorded, not judged); add its steady median +-5 % there",
                file=sys.stderr,
            )
        print(band or ascendci.BASELINE_BAND)
    return 0
