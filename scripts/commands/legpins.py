"""Regenerate the leg pin closures in ci/leg-*.txt with uv (--check: compare only, exit 1 when stale)."""

from __future__ import annotations

import argparse

from scripts.legs import legpins


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when a file is stale")


def run(args: argparse.Namespace) -> int:
    return legpins.pins_main(args.check)
