"""Build (or reuse) one leg's environment under .work/envs, and show its versions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scripts.legs import legenv
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("leg", choices=legenv.LEGS)
    p.add_argument("--python", type=Path, help="run in an overlay venv on this interpreter")
    p.add_argument("--versions", action="store_true", help="print the env's versions")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    found = legenv.interpreter(ws, args.leg, legenv.LegOptions(python=args.python))
    if args.versions:
        print(json.dumps(legenv.versions(found.python), indent=2))
    return 0
