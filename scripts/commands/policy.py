"""Check the repository's text: citations resolve, the README's tables are current, workflows pin and
bound."""

from __future__ import annotations

import argparse

from scripts import policy
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def run(args: argparse.Namespace, ws: Workspace) -> int:
    found = policy.findings(ws)
    for line in found:
        print(f"policy: {line}")
    return 1 if found else 0
