"""Entry point: `python -m scripts <command>`; the nox sessions call these."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

from scripts import commands, mutate, pr, rebase
from scripts.errors import KitError
from scripts.report import fail


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("apply", help="pristine pin + the series -> .work/vllm-omni")
    a.add_argument("--3way", dest="threeway", action="store_true", help="let git am fall back to a 3-way merge")
    a.add_argument("--force", action="store_true", help="discard edits in the checkout that are not in patches/")
    a.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="after resolving a conflict: finish the paused git am and apply the remaining patches",
    )
    a.add_argument("--abort", action="store_true", help="go back to the checkout as it was before the apply stopped")
    a.add_argument("--source", choices=("wheel", "git"), default=os.environ.get("KIT_SOURCE"))
    a.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=bool(os.environ.get("CI")),
        help="patches that need line offsets are an error (default on in CI)",
    )
    r = sub.add_parser("refresh", help="export the checkout's commits back to patches/")
    r.add_argument(
        "--drop", action="append", default=[], metavar="SLUG", help="a patch the checkout no longer holds, on purpose"
    )
    lt = sub.add_parser("lint", help="ruff with upstream's settings + the kit's checks on the series")
    lt.add_argument("--ruff", default="ruff", help="the ruff executable (upstream pins v0.14.10)")
    ts = sub.add_parser(
        "test",
        help="the CPU regression suite on the checkout, in both legs or the ones named (stock|npu)",
        usage="python -m scripts test [stock|npu]... [--jobs N] [--changed] [pytest arguments]",
        epilog="stock: no torch_npu; npu: real torch_npu, or the simulated NPU without CANN. "
        "--jobs N: at most N legs at once (default: as many as the cores allow; 1: one after the other). "
        "--changed: only the test modules that cover the patches changed since the last green run.",
    )
    ts.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # read by legs.parse_test_args
    bn = sub.add_parser("bench", help="the NPU gather/memory benchmark in the npu leg")
    bn.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest")
    pn = sub.add_parser("pin", help="show the pin, or record the git commit of its tag")
    pn.add_argument("--record-git", action="store_true", help="resolve git.tag at git.url and write git.commit")
    for name, module in (("pr", pr), ("rebase", rebase), ("mutate", mutate)):
        sp = sub.add_parser(name, help=(module.__doc__ or "").splitlines()[0])
        module.add_arguments(sp)
        sp.set_defaults(handler=module.command)
    return p


class Terminated(BaseException):
    """SIGTERM, raised like Ctrl-C so that every cleanup (finally, with) runs."""


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    if extra and args.command != "test":
        parser().error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:  # `test --durations=15`: what argparse does not know before the first leg goes on to pytest
        args.args = [*extra, *args.args]
    handler: Callable[[argparse.Namespace], int] = getattr(args, "handler", None) or getattr(commands, args.command)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return handler(args)
    except KitError as exc:
        fail(str(exc))
        return exc.exit_code
    except (KeyboardInterrupt, Terminated):
        fail(f"{args.command} interrupted -- nothing is half-written; run it again (other commands say if it must)")
        return 130
    except OSError as exc:  # the last guard: a file the kit could not read or write, named in one line
        fail(
            f"{args.command}: {exc.strerror or exc}: {exc.filename or ''} -- check that path (permissions, free space)"
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
