"""Prepare the upstream PRs of the stack (patches/stack.toml): per PR a signed-off branch,
format-patch files and a body; the cover, precheck and a range-diff per PR. --check-stack checks
the stack's invariants alone."""

from __future__ import annotations

import argparse

from scripts.checks.lint import tools_for
from scripts.commands.common import checkout_lock
from scripts.pr import prepare, revision
from scripts.pr.branch import user_identity
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="replace .work/pr/vN when preparing the same revision again (a push never replaces others' commits)",
    )
    p.add_argument(
        "--onto",
        nargs=2,
        metavar=("URL", "REF"),
        help="make pr/vN on upstream's REF (branch, tag or sha) fetched from URL into .work/upstream",
    )
    p.add_argument(
        "--3way",
        dest="threeway",
        action="store_true",
        help="with --onto: accept patches that need a merge",
    )
    p.add_argument(
        "--push-to", metavar="FORK", help="with --onto: push pr/vN to your fork (a URL or a path)"
    )
    p.add_argument(
        "--check-stack",
        action="store_true",
        help="only check the stack (patches/stack.toml): each PR's size, tests that need a later "
        "PR, and its own tests on its base in both legs; makes nothing",
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="with --push-to: open the PR with gh (installed, logged in)",
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    prepare.check_flags(args)
    identity = user_identity(ws.root)
    if args.check_stack:
        with checkout_lock(ws):  # scratch worktrees of the checkout
            return revision.check_stack(ws, args, identity)
    tools = tools_for(ws)  # once, before anything runs
    with checkout_lock(ws):  # pr/vN is written into the checkout
        return revision.prepare_revision(ws, args, identity, tools)
