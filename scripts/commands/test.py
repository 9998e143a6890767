"""The CPU regression suite on the checkout, in both legs or the ones named (stock|npu).

stock: no torch_npu; npu: real torch_npu, or the simulated NPU without CANN.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.commands.common import checkout_lock, current
from scripts.errors import KitError
from scripts.legs import legenv, legrun, modes, suite
from scripts.workspace import Workspace

USAGE = "python -m scripts test [stock|npu]... [--jobs N] [--changed] [--python PATH] [--require MODE] [pytest args]"
PASSTHROUGH = (
    True  # what the options below do not name goes to pytest (`-k rope`, `--durations=15`)
)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive whole number (--jobs 1: one after the other)"
        )
    return int(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The kit's options of `test`, declared once; the noxfile reads them too (flags)."""
    p.usage = USAGE
    p.allow_abbrev = False  # `--co` or `--py...` are pytest's, never a prefix of the kit's options
    p.epilog = "Leg names come first; every argument the options above do not name goes to pytest."
    p.add_argument(
        "--jobs",
        type=positive_int,
        metavar="N",
        help="at most N legs at once (default: as many as the cores allow; 1: one after the other)",
    )
    p.add_argument(
        "--changed",
        action="store_true",
        help="only the test modules that cover the patches changed since the last green run",
    )
    p.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="run the npu leg in that interpreter (plus the test tools) instead of its venv",
    )
    p.add_argument(
        "--require", choices=modes.MODES, help="the npu leg's mode must be this one, else it fails"
    )
    p.set_defaults(pytest_args=[])


def flags() -> dict[str, bool]:
    """Each option of `test` -> whether it takes a value: `nox -s refresh test -- --changed` keeps them
    from refresh."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    return {flag: action.nargs != 0 for action in p._actions for flag in action.option_strings}


def choices(args: argparse.Namespace) -> suite.TestArgs:
    """The legs named before the first pytest argument (default: both), and the checked options."""
    rest = list(args.pytest_args)
    legs: list[str] = []
    while rest and rest[0] in legenv.LEGS:
        leg = rest.pop(0)
        legs += [] if leg in legs else [leg]
    chosen = tuple(legs) or legenv.LEGS
    if args.require is not None and chosen != ("npu",):
        leg = next(leg for leg in chosen if leg != "npu")
        raise KitError(
            f"--require {args.require} for leg {leg}",
            "only the npu leg takes --require: real or simulated",
        )
    options = legenv.LegOptions(python=args.python, require=args.require)
    return suite.TestArgs(chosen, args.jobs, args.changed, options, rest)


def run(args: argparse.Namespace, ws: Workspace) -> int:
    """Both legs (or the ones named), under the checkout's shared lock."""
    opts = choices(args)
    with checkout_lock(ws, shared=True):
        return legrun.run_legs(ws, current(ws), opts)
