"""What the Ascend CI jobs ask of ci/ascend/: the image of a runner label or queue, the model, the
band, the hold."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from scripts import ascendci, records
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
    baseline = sub.add_parser(
        "baseline",
        help="after a passed e2e run with no band: record it (.work/records/e2e.json) as the "
        "baseline of the cards' chip model",
    )
    for p_ in (band, baseline):
        p_.add_argument(
            "--baselines",
            default=os.environ.get("KIT_ASCEND_BASELINES") or None,
            help="the folder of recorded baselines (default: KIT_ASCEND_BASELINES, else "
            ".work/records/ascend-baselines)",
        )
    baseline.add_argument(
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


def card_chip(cards: tuple[int, ...]) -> tuple[str, str]:
    """The chip model of the cards, checked as the e2e's preflight checks them (counted as chips,
    a preset ASCEND_RT_VISIBLE_DEVICES, busy cards), and the check's line."""
    check = preflight.check_cards(cards, preflight.npu_smi_info(), os.environ)
    return check.detail.split(":", 1)[0], f"kit: cards {check.detail}"


def baselines_dir(args: argparse.Namespace, ws: Workspace) -> Path:
    return Path(args.baselines) if args.baselines else ws.records / ascendci.BASELINES_DIR


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
    elif args.what == "baseline":
        chip, shown = card_chip(args.cards)
        summary = records.read(ws.records, "e2e")
        if summary and summary.get("band_ms") != ascendci.baseline_band():
            print(
                f"kit: the e2e was judged by the band {summary.get('band_ms')}: no baseline to record"
            )
            return 0
        entry = ascendci.baseline_from(summary, chip)
        path = ascendci.baseline_file(baselines_dir(args, ws), chip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
        print(shown)
        print(
            f"kit: the {chip} baseline: steady median {entry['median_ms']:g} ms, recorded in "
            f"{path}; the next run is judged against it. Add to ci/{ascendci.BANDS}:"
        )
        print(ascendci.bands_toml(chip, entry), end="")
    else:
        chip, shown = card_chip(args.cards)
        band = ascendci.choose_band(
            ascendci.load(ws.ci_dir, ascendci.BANDS), chip, baselines_dir(args, ws)
        )
        print(shown, file=sys.stderr)
        if band.note:
            # stderr: the job reads the band from stdout
            print(band.note, file=sys.stderr)
        print(band.text)
    return 0
