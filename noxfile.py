"""Sessions of the vllm-omni Ascend NPU kit: a table of contents. The logic lives in scripts/.

nox -s apply test      pristine pin + patches/ -> .work/vllm-omni, then both CPU test legs
nox -s lint            upstream's pre-commit hooks + the kit's checks + the off-NPU proof
nox -s refresh         checkout commits -> patches/ (byte-stable)
nox -s kit             the kit's own tests, default tier; "kit(tier='heavy')": legs, e2e, network
nox -s e2e -- ...      realtime benchmark on 4 Ascend cards (self-hosted runners)
nox -s pr / rebase     upstream PR preparation / try the series on another pin
nox -s bench           NPU gather and memory figures
nox -s mutate          mutation testing of the series' added lines against both legs

Every installer a session starts gets the user's package index, read once (scripts/pipindex.py).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

if sys.version_info < (3, 11):  # noqa: UP036 -- the one line a user on an old python must see
    sys.exit(
        f"nox: the kit needs Python >= 3.11, this is {sys.version.split()[0]}: run nox with "
        "python3.11 or newer"
    )

import nox  # noqa: E402

# the kit's scripts/, for the pins and the leg names
sys.path.insert(0, str(Path(__file__).parent))
from scripts import kittools, pipindex  # noqa: E402
from scripts.commands import test as test_command  # noqa: E402
from scripts.errors import KitError  # noqa: E402
from scripts.kittools import KIT_TIERS, kit_tests_command  # noqa: E402
from scripts.legs.legenv import LEGS  # noqa: E402
from scripts.workspace import Workspace  # noqa: E402

KIT = Workspace(Path(__file__).parent)
KIT_TOOLS = KIT.kit_tools

# the version pinned in ci/kit-tools.txt (what the README installs)
nox.needs_version = ">=2026.10.20"
nox.options.sessions = ["apply", "lint", "test"]
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
# Sessions that make their own venv use uv (fast, cached) where it is installed, else virtualenv.
VENV_BACKEND = "uv|virtualenv"


def pinned(name: str) -> str:
    return kittools.pinned(name, KIT_TOOLS)


@functools.cache
def package_index() -> pipindex.IndexSettings:
    """The user's package index, read once per nox command by the pinned pip of the interpreter
    running nox (the README's venv), with pip's own precedence."""
    return pipindex.read(os.environ)


def install(session: nox.Session, *args: str) -> None:
    """Install into the session's venv from the user's package index, with .pyc written: uv writes
    none by default, and where PYTHONDONTWRITEBYTECODE is set (CI images) every interpreter of the
    session (pytest-xdist workers, e2e clients, plot subprocesses) would compile pytest, numpy and
    matplotlib again.

    What the session runs after gets the index too, as pip's variables, and the pip that read it
    (KIT_PIP_PYTHON): a uv-made venv has no pip, and the kit command's own installers (leg envs,
    gate envs, registry look-ups) read the index again there.
    """
    try:
        index = package_index()
    except KitError as err:
        session.error(f"kit: error: {err}")
    session.env.update({**pipindex.pip_env(index), pipindex.PIP_PYTHON: sys.executable})
    uv_index = pipindex.uv_env(index, os.environ)
    session.install(*args, env={"UV_COMPILE_BYTECODE": "1", **uv_index})


def kit_venv(session: nox.Session, *packages: str) -> None:
    """A session venv the kit runs in: pip besides packages (uv makes venvs without pip, and the kit
    fetches release wheels with the pip of the interpreter that runs it: rebase, pr --onto)."""
    install(session, pinned("pip"), *packages)


def run_kit(session: nox.Session, *args: str, posargs: list[str] | None = None) -> None:
    """Run one kit command with the interpreter running nox (the kit itself needs only the stdlib)."""
    posargs = session.posargs if posargs is None else posargs
    session.run(sys.executable, "-m", "scripts", *args, *posargs, external=True)


def without_test_flags(posargs: list[str]) -> list[str]:
    """nox gives every session the same posargs: in `nox -s refresh test -- --changed`, --changed is
    test's."""
    flags = test_command.flags()
    out, skip_value = [], False
    for arg in posargs:
        name, eq, _ = arg.partition("=")
        if not skip_value and name not in flags:
            out.append(arg)
        skip_value = not skip_value and not eq and flags.get(name, False)
    return out


@nox.session(venv_backend="none")
def apply(session: nox.Session) -> None:
    """Build .work/vllm-omni: the pinned release (sha256 verified), then one commit per patch."""
    run_kit(session, "apply", posargs=without_test_flags(session.posargs))


@nox.session(venv_backend="none")
def refresh(session: nox.Session) -> None:
    """Export the checkout's commits back to patches/ and series, byte-stably."""
    run_kit(session, "refresh", posargs=without_test_flags(session.posargs))


def gate_tools(session: nox.Session) -> None:
    """Install the pinned pre-commit (it runs upstream's hooks, each in an env it makes once under
    .work/pre-commit) and pyyaml (--onto judges YAML patches as data)."""
    install(session, pinned("pre-commit"), pinned("pyyaml"))


@nox.session(venv_backend=VENV_BACKEND)
def lint(session: nox.Session) -> None:
    """Upstream's pre-commit hooks at its pins (typos, ruff, whitespace, ...), KIT001-KIT007, the
    off-NPU proof."""
    # in the session's python, where gate_tools installs pre-commit
    gate_tools(session)
    session.run("python", "-m", "scripts", "lint", *session.posargs)


@nox.session(venv_backend="none")
def test(session: nox.Session) -> None:
    """The CPU regression suite on the patched tree, both legs, in parallel when the cores allow.

    -- --jobs 1: one leg after the other; -- --changed: only the tests of patches changed since the
    last green run.
    """
    run_kit(session, "test")


def test_one_leg(leg: str) -> None:
    """`nox -s "test(leg='stock')"`: one leg only (flags after -- as for `test`)."""

    @nox.session(name=f"test(leg='{leg}')", venv_backend="none", default=False)
    def one(session: nox.Session) -> None:
        """One CPU test leg (flags after -- as for test)."""
        run_kit(session, "test", leg)


for _leg in LEGS:
    test_one_leg(_leg)


@nox.session(venv_backend=VENV_BACKEND)
def kit(session: nox.Session) -> None:
    """The kit's own tests (tests/kit), default tier: not legs, e2e or network; in parallel
    (pytest-xdist)."""
    # pre-commit among them: the lint tests run it
    install(session, "-r", str(KIT_TOOLS))
    session.run(*kit_tests_command("default", session.posargs))


def kit_tier(tier: str) -> None:
    """`nox -s "kit(tier='heavy')"`: the tests marked legs, e2e or network (pytest.ini), in parallel by
    module."""

    @nox.session(name=f"kit(tier='{tier}')", venv_backend=VENV_BACKEND, default=False)
    def one(session: nox.Session) -> None:
        """The kit's own tests of one tier (flags after -- go to pytest)."""
        install(session, "-r", str(KIT_TOOLS))
        session.run(*kit_tests_command(tier, session.posargs))


for _tier in KIT_TIERS:
    if _tier != "default":
        kit_tier(_tier)


@nox.session(venv_backend=VENV_BACKEND, default=False)
def e2e(session: nox.Session) -> None:
    """LingBot-World realtime benchmark on 4 Ascend cards, two independent runs (-- --standin: the test
    stand-in)."""
    # the kit's client, frame hashes and the evidence's plot; the server is elsewhere
    kit_venv(session, pinned("websockets"), pinned("av"), pinned("matplotlib"))
    session.run("python", "-m", "scripts", "e2e", *session.posargs)


@nox.session(venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Whole-block vs per-token gather and the NPU path's memory vs the reference (docs/results.md)."""
    run_kit(session, "bench")


@nox.session(venv_backend="none", default=False)
def mutate(session: nox.Session) -> None:
    """Mutation testing of the lines the series adds, against both legs (JSON record in .work/records)."""
    run_kit(session, "mutate")


@nox.session(venv_backend=VENV_BACKEND, default=False)
def pr(session: nox.Session) -> None:
    """Prepare the upstream PR: signed-off branch, format-patch files, PR body from records, precheck,
    range-diff."""
    # pip: --onto fetches the release; gate_tools brings pre-commit for its gates
    kit_venv(session)
    gate_tools(session)
    session.run("python", "-m", "scripts", "pr", *session.posargs)


@nox.session(venv_backend=VENV_BACKEND, default=False)
def rebase(session: nox.Session) -> None:
    """Try the series on another release or git ref (-- 0.28.0 | latest | --git URL REF [--move])."""
    # YAML files are compared as parsed data
    kit_venv(session, pinned("pyyaml"))
    session.run("python", "-m", "scripts", "rebase", *session.posargs)
