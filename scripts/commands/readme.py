"""Print the README's generated tables (the series, the KIT rules), markers included, to paste over the
old ones."""

from __future__ import annotations

import argparse

from scripts import readme
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def run(args: argparse.Namespace, ws: Workspace) -> int:
    print("\n\n".join(readme.expected_blocks(ws.patches).values()))
    return 0
