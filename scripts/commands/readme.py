"""Print the README's generated tables (the series, the KIT rules), markers included, to paste over the old ones."""

from __future__ import annotations

import argparse

from scripts import readme


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def run(args: argparse.Namespace) -> int:
    print("\n\n".join(readme.expected_blocks().values()))
    return 0
