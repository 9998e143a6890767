"""The LingBot-World realtime benchmark: independent server+bench runs, md5 determinism, the band (--help: all)."""

from __future__ import annotations

import argparse

from scripts.e2e import run as e2e_run

PASSTHROUGH = True  # the e2e has its own parser (scripts/e2e/config.py)
OWN_HELP = True  # so `e2e --help` shows that parser's help


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    return e2e_run.main(args.args)
