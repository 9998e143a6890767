"""The kit's one front door: `python -m scripts COMMAND ...`; the nox sessions call these."""

from __future__ import annotations

import signal
import sys

# a signal while Python loads the kit: nothing has started (main() takes over below)
if __name__ == "__main__":

    def _before_start(signum: int, _frame: object) -> None:
        sys.stderr.write(
            f"kit: error: interrupted by {signal.Signals(signum).name} before any command started "
            "-- nothing was changed; run it again\n"
        )
        raise SystemExit(130)

    for _ending in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        # signals.takeable, before the kit can be imported
        if signal.getsignal(_ending) is not signal.SIG_IGN:
            signal.signal(_ending, _before_start)

import argparse  # noqa: E402 -- after the handlers above
import io  # noqa: E402
from pathlib import Path
from types import ModuleType
from typing import NoReturn

# `python path/to/scripts COMMAND` from any folder (`-m scripts` needs the kit's root as cwd)
if not __package__:
    # path/to/scripts -> the kit, so `scripts` imports
    sys.path[0] = str(Path(sys.path[0]).resolve().parent)

from scripts import signals
from scripts.errors import KitError, failed_where, os_fix
from scripts.report import fail, kept_output
from scripts.workspace import Workspace


def command_modules() -> tuple[ModuleType, ...]:
    """Every command, in pipeline order: pin -> series/checkout -> checks -> legs -> e2e -> PR, then
    upkeep.

    Imported here, not at the top, so that a Ctrl-C while they load is the kit's one line, not a
    traceback.
    """
    from scripts.commands import (
        apply,
        ascendci,
        bench,
        e2e,
        legenv,
        legpins,
        lint,
        mutate,
        pin,
        policy,
        pr,
        readme,
        rebase,
        refresh,
        test,
    )

    return (
        pin,
        apply,
        refresh,
        lint,
        test,
        bench,
        legenv,
        legpins,
        mutate,
        e2e,
        ascendci,
        pr,
        rebase,
        readme,
        policy,
    )


def name_of(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


class Parser(argparse.ArgumentParser):
    """argparse's usage errors as the kit's one line (exit 2), like every other refusal; subcommands
    inherit it."""

    def error(self, message: str) -> NoReturn:
        raise KitError(message, f"see {self.prog} --help")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m scripts", description=__doc__)
    p.add_argument(
        "--version",
        action="store_true",
        help="what this kit carries: the pinned release and the series",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        doc = (module.__doc__ or "").strip()
        passthrough = getattr(module, "PASSTHROUGH", False)
        # A passthrough command (test, bench) hands what argparse does not know on to pytest.
        sp = sub.add_parser(name_of(module), help=doc.splitlines()[0], description=doc)
        module.add_arguments(sp)
        sp.set_defaults(run=module.run, passthrough=passthrough)
    return p


def on_ending_signal(signum: int, frame: object) -> None:
    """A signal that ends a run (a closed terminal, a cancelled CI job, Ctrl-\\) is raised like Ctrl-C,
    named (KeyboardInterrupt("SIGTERM")), so that every cleanup (finally, with) runs and the state
    can say what ended it."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install_run_handlers() -> None:
    """The program's own settings, made by the shell below only (an in-process caller keeps its own):
    every ending signal is a KeyboardInterrupt from here on, and an ASCII (C locale) terminal gets
    other text escaped, no crash."""
    for ending in signals.takeable():  # one ignored as the kit started (nohup) stays ignored
        signal.signal(
            ending, signal.default_int_handler if ending == signal.SIGINT else on_ending_signal
        )
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line as the command's run() gets it; a passthrough command (test, bench) gets what
    argparse does not know in its `pytest_args`."""
    p = parser()
    args, extra = p.parse_known_args(argv)
    if args.version or args.command is None:
        if args.command is not None or extra or not args.version:
            what = (
                "--version takes no COMMAND"
                if args.version
                else "the following arguments are required: COMMAND"
            )
            raise KitError(what, f"see {p.prog} --help")
        return args
    if extra and not args.passthrough:
        raise KitError(
            f"unrecognized arguments: {' '.join(extra)}", f"see {p.prog} {args.command} --help"
        )
    if extra:  # pytest's, in their order, before what the command's own remainder holds
        args.pytest_args = [*extra, *args.pytest_args]
    return args


def version_line(ws: Workspace) -> str:
    """The kit has no release of its own: what it is, is the release it pins and the series it carries."""
    from scripts.pin import load_pin
    from scripts.series import load_series, series_digest

    pin, patches = load_pin(ws.pin_file), load_series(ws.patches)
    return f"vllm-omni NPU kit: {len(patches)} patches (series {series_digest(patches)[:16]}) on {pin.label}"


def main(argv: list[str], workspace: Workspace) -> int:
    """Parse, dispatch to the command on `workspace`, and turn its refusals into one line and an exit
    code."""
    try:
        args = parse(argv)
        if args.version:
            print(version_line(workspace))
            return 0
    except KitError as exc:
        fail(str(exc))
        return exc.exit_code
    except (
        KeyboardInterrupt,
        RuntimeError,
    ) as stop:  # while the commands load: nothing has started
        # Python wraps a Ctrl-C that lands while a dataclass is made (in __set_name__) in a
        # RuntimeError
        signal_ = stop if isinstance(stop, KeyboardInterrupt) else stop.__cause__
        if not isinstance(signal_, KeyboardInterrupt):
            raise
        fail(
            f"interrupted by {str(signal_) or 'SIGINT'} before any command started -- nothing was "
            "changed; "
            "run it again"
        )
        return 130
    with kept_output() as output:
        code = run_command(args, workspace)
    if output.failed and code in (0, 1):  # the work ran to its end; only the report of it is lost
        fail(
            f"{args.command} finished, but {output.line()} -- its work is done and stays (nothing "
            "to undo); "
            "run it again with its output going where it can be written, to see its report"
        )
        return 2 if code == 0 else code
    return code


def run_command(args: argparse.Namespace, workspace: Workspace) -> int:
    """The command's exit code; its refusals and interruptions said in one line."""
    try:
        return args.run(args, workspace)
    except KitError as exc:
        fail(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as stop:
        fail(
            f"{args.command} interrupted by {str(stop) or 'SIGINT'} -- nothing is half-written; "
            "run it again "
            "(other commands say if it must)"
        )
        return 130
    # the last guard: a file the kit could not read or write, named in one line
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else " (writing a file the system did not name)"
        # the fix names the folder the kit was given (--evidence-root, a path argument), not a default
        fix = os_fix(exc, failed_where(exc, ".work"))
        fail(f"{args.command}: {exc.strerror or exc}{where} -- {fix}")
        return 2


if __name__ == "__main__":
    install_run_handlers()
    sys.exit(main(sys.argv[1:], Workspace.of_kit()))
