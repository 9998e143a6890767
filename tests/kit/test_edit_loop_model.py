"""A model-based test of the edit loop (docs/recovery.md lists the invariants it checks after every
step).

A hypothesis `RuleBasedStateMachine` drives the real CLI and real git on a small synthetic kit: its
rules are the user's actions, its model a list of patches (slug, subject, file contents) for
patches/ and one for the checkout. Each patch owns its own upstream file, so no reorder or drop
conflicts and every outcome is predictable. Profiles: `small` (default, part of the kit's suite) and
`long` (KIT_MODEL_PROFILE=long; the weekly workflow).
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from subprocess import PIPE, CompletedProcess

import pytest
from conftest import (
    AUTHOR,
    KIT_ROOT,
    SMALL_UPSTREAM,
    Kit,
    build_wheel,
    clone,
    copy_kit,
    live_processes,
    pin_toml,
)
from hypothesis import HealthCheck, event, note, seed, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition
from hypothesis.stateful import rule as hypothesis_rule

from scripts import worklock
from scripts.gitcmd import git

SLOTS = 6  # upstream files a patch can own: at most this many patches at once
LINES = 12
# lines a patch changes: far enough apart for separate hunks, each with context
EDITABLE = (2, 5, 9)
SUBJECTS = ("[NPU] Fix the guard", "[Bugfix] Größe der Blöcke", "[Misc] Tidy the cache")
PAUSED = ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD")
FOLD_PREFIXES = ("fixup! ", "squash! ", "amend! ")
USER_ENV = {**AUTHOR, "GIT_EDITOR": "true"}
PROFILES = {
    "small": settings(
        max_examples=10,
        stateful_step_count=10,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    ),
    "long": settings(
        max_examples=100,
        stateful_step_count=25,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    ),
}
# The small profile's sessions, pinned: derandomized alone, hypothesis seeds them from the machine's
# source text, so any edit of the class changed which sessions the default tier runs (and what they
# reach). The seed they had then:
SMALL_SEED = 0x9E99FE24C7E50F76AAB3529AC0938E172CE071FA64750DDF0D5E061C4BF69C1DB47176A5FD38EE607FE7EFDE37EF45E5


def slot_path(slot: int) -> str:
    return f"vllm_omni/slot{slot}.py"


def upstream_lines(slot: int) -> tuple[str, ...]:
    return tuple(f"slot {slot} line {i}" for i in range(LINES))


def as_text(lines: tuple[str, ...]) -> str:
    return "".join(f"{line}\n" for line in lines)


UPSTREAM = {**SMALL_UPSTREAM, **{slot_path(s): as_text(upstream_lines(s)) for s in range(SLOTS)}}


@dataclass(frozen=True)
class Change:
    """The model of one patch: its identity, message and the lines of the files it owns."""

    slug: str
    subject: str
    files: tuple[tuple[int, tuple[str, ...]], ...]  # (slot, that file's lines)

    @classmethod
    def new(cls, slug: str, subject: str, slot: int) -> Change:
        return cls(slug, subject, ((slot, upstream_lines(slot)),)).edited(slot, 5, f"{slug} 1")

    @property
    def message(self) -> str:
        return f"{self.subject}\n\nWhy {self.slug}.\n\nUpstream-Status: Pending\nKit-Patch: {self.slug}\n"

    def edited(self, slot: int, line: int, text: str) -> Change:
        files = tuple(
            (s, ls[:line] + (text,) + ls[line + 1 :] if s == slot else ls) for s, ls in self.files
        )
        return replace(self, files=files)

    def hunks(self) -> list[tuple[str, list[str], list[str]]]:
        """(path, removed lines, added lines) as a diff of each file against upstream shows them."""
        out = []
        for slot, lines in sorted(self.files):
            changed = [
                (old, new)
                for old, new in zip(upstream_lines(slot), lines, strict=True)
                if old != new
            ]
            out.append((slot_path(slot), [old for old, _ in changed], [new for _, new in changed]))
        return out


def file_name(position: int, change: Change) -> str:
    return f"{position:04d}-{change.slug}.patch"


def parsed_hunks(patch_text: str) -> list[tuple[str, list[str], list[str]]]:
    """(path, removed, added) per file of a patch file's diff, as `Change.hunks` orders them."""
    out: list[tuple[str, list[str], list[str]]] = []
    for line in patch_text.splitlines():
        if line.startswith("diff --git a/"):
            out.append((line.split(" b/", 1)[1], [], []))
        elif out and line[:1] in ("-", "+") and not line.startswith(("--- ", "+++ ")):
            out[-1][1 if line[0] == "-" else 2].append(line[1:])
    return sorted(out)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (hidden ones too: a left-over temporary file is a change)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def last_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# Interrupted: 130, or killed by SIGINT itself (Python does that when the signal comes as it starts
# or exits).
INTERRUPTED = (130, -signal.SIGINT)
# apply's and refresh's run time after STARTUP, timed once on the template
DURATION: dict[str, float] = {}
# How long a bare interpreter takes to start: no program can see a signal before that.
_started = time.monotonic()
subprocess.run([sys.executable, "-c", "pass"], check=True)
STARTUP = time.monotonic() - _started


def spawn(
    kit: Kit, *args: str, signal_after: tuple[float, int] | None = None
) -> subprocess.Popen[str]:
    """`python -m scripts ARGS` in a process group of its own, as a shell runs it (a signal reaches its
    gits too), sent `signal_after` = (seconds, signal) unless it ended before."""
    cmd, env = [sys.executable, "-m", "scripts", *args], {**os.environ, "CI": ""}
    proc = subprocess.Popen(
        cmd, cwd=kit.root, env=env, text=True, stdout=PIPE, stderr=PIPE, start_new_session=True
    )
    if signal_after is not None:
        try:
            proc.wait(timeout=signal_after[0])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal_after[1])
    return proc


def run_kit(
    kit: Kit, *args: str, interrupt_after: float | None = None, spawned: bool = False
) -> CompletedProcess:
    """The real CLI in this process (0.1 s a call instead of 0.6 s), or spawned: to be Ctrl-C'd (SIGINT
    to the group, as a terminal's) or to run a copy's scripts/ a test broke on purpose. Nothing it
    started may remain."""
    if interrupt_after is None and not spawned:
        before = set(processes(1, os.getpid()))
        done = kit.run(*args)
        left = sorted(set(processes(1, os.getpid())) - before)
    else:
        proc = spawn(
            kit,
            *args,
            signal_after=None if interrupt_after is None else (interrupt_after, signal.SIGINT),
        )
        try:
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            left = processes(2, proc.pid)
            if left:
                os.killpg(proc.pid, signal.SIGKILL)
        done = CompletedProcess(args, proc.returncode, stdout, stderr)
    assert not left, f"kit {args}: its processes still run after it returned: {left}"
    return judged(args, done, interrupt_after)


def judged(
    args: tuple[str, ...], outcome: CompletedProcess, interrupt_after: float | None
) -> CompletedProcess:
    """The endings every run must keep: no traceback, exit 0, 1 (a conflict) or 2 (or interrupted), and
    a failure says one `kit: error: <what> -- <fix>` line."""
    code, output, last = (
        outcome.returncode,
        outcome.stdout + outcome.stderr,
        last_line(outcome.stderr),
    )
    signalled = f" (Ctrl-C after {interrupt_after} s)" if interrupt_after else ""
    say(f"  kit {' '.join(args)}{signalled} -> exit {code}: {last}")
    if currently_in_test_context():  # the statistics: which outcomes the run reached
        event(f"{args[0]}{' interrupted' if interrupt_after else ''} -> exit {code}")
    assert "Traceback" not in output, f"kit {args}: a traceback\n{output}"
    # a conflict, as in rebase
    failed = 1 if args[0] == "apply" and " does not apply: " in last else 2
    assert code in ((0, failed, *INTERRUPTED) if interrupt_after else (0, failed)), (
        f"kit {args}: exit {code}\n{output}"
    )
    if code != 0:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        # Killed by SIGINT itself, Python was before the kit's first line or past its last: no line
        # is possible.
        assert len(lines) == 1 or (code == -signal.SIGINT and not lines), (
            f"kit {args}: not exactly one line\n{output}"
        )
        assert all(ln.startswith("kit: error: ") and " -- " in ln for ln in lines), (
            f"not '<what> -- <fix>': {lines}"
        )
    return outcome


# this session's steps and the kit's answers, for a failure that does not replay
HISTORY: list[str] = []


def say(text: str) -> None:
    HISTORY.append(text)
    if currently_in_test_context():
        note(text)  # hypothesis prints it under the step


def rule(**strategies: st.SearchStrategy) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """hypothesis's rule, its steps logged: a failure it raises carries the session's steps (one that
    depends on when a signal landed may not replay, and then hypothesis cannot print the steps
    itself)."""

    def logged(step: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(step)
        def run(machine: EditLoop, **kwargs: object) -> None:
            HISTORY.append(
                f"state.{step.__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
            )
            try:
                step(machine, **kwargs)
            except AssertionError as exc:
                if "\nthis session:\n" in str(exc):
                    raise
                raise AssertionError(f"{exc}\nthis session:\n" + "\n".join(HISTORY)) from exc

        return hypothesis_rule(**strategies)(run)

    return logged


def processes(field: int, value: int) -> list[str]:
    """Live processes (pid, state, command line) whose /proc stat field after the name (1: ppid, 2:
    pgrp) is value."""
    return [
        f"{pid} {fields[0]} " + b" ".join(args).decode(errors="replace")
        for pid, fields, args in live_processes()
        if int(fields[field]) == value
    ]


@dataclass(frozen=True)
class Scene:
    patches: dict[str, bytes]
    branch: str
    head: str
    status: str
    state: bytes


# the first one's subject: a fold aims by commit, never by subject
INITIAL = (
    Change.new("guard", SUBJECTS[0], 0),
    Change.new("blocks", SUBJECTS[1], 1),
    Change.new("guard-too", SUBJECTS[0], 2),
)


def write_files(checkout: Path, change: Change) -> None:
    for slot, lines in change.files:
        (checkout / slot_path(slot)).write_text(as_text(lines), encoding="utf-8")


@functools.cache
def template() -> Kit:
    """One small kit with the INITIAL series, built once; each example works on a copy of it."""
    where = Path(tempfile.mkdtemp(prefix="kit-model-template-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    kit = copy_kit(where / "kit", with_patches=False)
    wheel, digest = build_wheel(where, UPSTREAM)
    kit.write_pin(pin_toml("0.1.0", wheel.name, digest))
    kit.seed_wheel(wheel)
    wheel.unlink()  # seeded: no copy of the kit needs it beside it
    kit.run("apply", check=True)
    for change in INITIAL:
        write_files(kit.checkout, change)
        git("add", "-A", cwd=kit.checkout)
        git("commit", "-q", "-m", change.message, cwd=kit.checkout, env=USER_ENV)
    kit.run("refresh", check=True)
    # where a drawn Ctrl-C lands: fixed per run, so a replay hits the same spot
    for command in ("apply", "refresh"):
        started = time.monotonic()
        kit.spawn(command, check=True)  # timed as run_kit runs it: a process of its own
        DURATION[command] = max(time.monotonic() - started - STARTUP, 0.1)
    return kit


class EditLoop(RuleBasedStateMachine):
    """The user (rules) against the model (`exported`: what patches/ holds; `work`: what the checkout
    holds)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kit-model-"))
        self.kit = clone(template(), self.tmp / "kit")
        self.checkout = self.kit.checkout
        self.exported: list[Change] = list(INITIAL)
        self.work: list[Change] = list(INITIAL)
        self.phase = (
            "clean"  # or "conflict" (apply stopped at a patch), "interrupted" (an apply got Ctrl-C)
        )
        self.synced = (
            True  # HEAD is what the kit last applied or exported: no commit of the user's since
        )
        # fixup!/squash! commits not folded yet, oldest first: (kind, target slug, aimed by a shared
        # subject)
        self.folds: list[tuple[str, str, bool]] = []
        self.top = INITIAL[-1].slug  # the patch the HEAD commit belongs to (what an amend changes)
        self.hand_edited: tuple[str, bytes] | None = (
            None  # a patch file the user broke: (name, its bytes)
        )
        self.made = 0
        self.own_code = (
            False  # True when a test broke the copy's scripts/: then the kit runs as a process
        )
        # the user's own branches and tags: ref -> commit (invariant 7)
        self.kept_refs: dict[str, str] = {}
        # the user's files that git ignores: path -> bytes (invariant 7)
        self.kept_files: dict[str, bytes] = {}
        HISTORY.clear()

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_kit(self, *args: str, interrupt_after: float | None = None) -> CompletedProcess:
        return run_kit(self.kit, *args, interrupt_after=interrupt_after, spawned=self.own_code)

    def user_git(self, *args: str, env: dict[str, str] | None = None) -> str:
        return git(*args, cwd=self.checkout, env={**USER_ENV, **(env or {})})

    def scene(self) -> Scene:
        state = self.checkout / ".git" / "kit-state.json"
        return Scene(
            patches=snapshot(self.kit.patches),
            branch=self.user_git("rev-parse", "--abbrev-ref", "HEAD").strip(),
            head=self.user_git("rev-parse", "HEAD").strip(),
            status=self.user_git("status", "--porcelain"),
            state=state.read_bytes() if state.is_file() else b"",
        )

    def commits(self) -> list[tuple[str, str]]:
        """(commit, message) after pristine, oldest first, fold commits included."""
        out = self.user_git("log", "--reverse", "--format=%H%x00%B%x1e", "pristine..HEAD")
        return [tuple(r.strip("\n").split("\x00", 1)) for r in out.split("\x1e") if r.strip("\n")]  # type: ignore[misc]

    def own_commits(self) -> list[tuple[str, str]]:
        """The commits that hold work[i], in order (fold commits are not patches)."""
        return [(c, m) for c, m in self.commits() if not m.startswith(FOLD_PREFIXES)]

    def used_slots(self) -> set[int]:
        return {slot for change in self.exported + self.work for slot, _ in change.files}

    def fresh_slug(self) -> str:
        taken = {c.slug for c in self.exported + self.work}
        while True:
            self.made += 1
            if f"new{self.made}" not in taken:
                return f"new{self.made}"

    def refused(self, outcome: CompletedProcess, before: Scene, *, needle: str = "") -> None:
        """Exit 2 (or 130), one line naming the thing and the fix, and nothing changed."""
        assert outcome.returncode in (2, *INTERRUPTED), f"expected a refusal, got {outcome}"
        assert needle in last_line(outcome.stderr), (
            f"the refusal should name {needle!r}: {outcome.stderr}"
        )
        self.unchanged(before)

    def unchanged(self, before: Scene) -> None:
        """patches/, the checkout's branch, HEAD and status, and its kit state are as they were."""
        after = self.scene()
        assert after == before, (
            f"a refusal changed {[k for k in vars(after) if getattr(after, k) != vars(before)[k]]}"
        )

    def succeeded(self, outcome: CompletedProcess) -> None:
        assert outcome.returncode == 0, f"expected success, got {outcome}"

    def patches_are(self, changes: list[Change], before: Scene) -> None:
        """patches/ holds `changes` in order; a patch the user did not change keeps its bytes."""
        series = (self.kit.patches / "series").read_text(encoding="utf-8")
        names = [
            line.strip()
            for line in series.splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert names == [file_name(i, c) for i, c in enumerate(changes, 1)], f"series is {names}"
        on_disk = sorted(
            p.name for p in self.kit.patches.iterdir() if p.is_file() and p.suffix == ".patch"
        )
        assert on_disk == sorted(names), f"patches/ holds {on_disk}, the series {names}"
        old = {file_name(i, c): c for i, c in enumerate(self.exported, 1)}
        for name, change in zip(names, changes, strict=True):
            text = (self.kit.patches / name).read_text(encoding="utf-8")
            assert parsed_hunks(text) == change.hunks(), (
                f"{name} does not hold the diff of {change.slug}"
            )
            assert (
                f"\nKit-Patch: {change.slug}\n" in text and "\nUpstream-Status: Pending\n" in text
            ), name
            assert text.count("\nKit-Patch: ") == 1, (
                f"{name} carries more than one Kit-Patch trailer"
            )
            if old.get(name) == change and self.hand_edited is None:
                assert before.patches[name] == text.encode(), (
                    f"{name} was rewritten although nothing changed in it"
                )
        others = {
            k: v
            for k, v in self.scene().patches.items()
            if not k.endswith(".patch") and k != "series"
        }
        assert others == {
            k: v for k, v in before.patches.items() if not k.endswith(".patch") and k != "series"
        }

    def checkout_is(self, changes: list[Change]) -> None:
        """The checkout's files and commit messages are the model's, and nothing is left uncommitted."""
        expected = {
            **UPSTREAM,
            **{slot_path(s): as_text(lines) for c in changes for s, lines in c.files},
        }
        wrong = [
            p
            for p, text in expected.items()
            if (self.checkout / p).read_text(encoding="utf-8") != text
        ]
        assert not wrong, f"the checkout's {wrong} are not the model's"
        messages = [m.rstrip("\n") for _, m in self.own_commits()]
        assert messages == [c.message.rstrip("\n") for c in changes], (
            f"commit messages {messages} are not the model's"
        )
        assert self.user_git("status", "--porcelain") == "", "the checkout has uncommitted changes"

    def missing(self) -> list[str]:
        held = {c.slug for c in self.work}
        return [c.slug for c in self.exported if c.slug not in held]

    def drops(self, drop: bool = True) -> list[str]:
        """refresh's --drop for each patch the checkout left out."""
        return [f"--drop={slug}" for slug in self.missing()] if drop else []

    def commit_user_edit(self, index: int, *args: str) -> None:
        """Edit work[index]'s file (a drawn line) and commit it with the given git commit options."""
        change = self.work[index]
        line = EDITABLE[(self.made + len(self.work)) % len(EDITABLE)]
        self.made += 1
        self.work[index] = change.edited(
            change.files[0][0], line, f"{change.slug} edit {self.made}"
        )
        write_files(self.checkout, self.work[index])
        self.user_git("commit", "-q", "-a", *args)
        self.synced = False

    def rebase(self, todo: list[str], *, new_top: bool = True) -> None:
        """`git rebase -i pristine` with the todo the user would write."""
        path = self.tmp / "todo"
        path.write_text("".join(f"{line}\n" for line in todo or ["noop"]), encoding="utf-8")
        self.user_git(
            "rebase",
            "-q",
            "-i",
            "pristine",
            env={"GIT_SEQUENCE_EDITOR": f"cp {shlex.quote(str(path))}"},
        )
        self.synced = False
        self.top = (self.work[-1].slug if self.work else "") if new_top else self.top

    @precondition(lambda self: self.phase == "clean" and len(self.used_slots()) < SLOTS)
    @rule(subject=st.sampled_from(SUBJECTS))
    def new_commit(self, subject: str) -> None:
        """A new patch: its own file, a commit with both trailers on top of the series branch."""
        slot = min(set(range(SLOTS)) - self.used_slots())
        change = Change.new(self.fresh_slug(), subject, slot)
        say(f"  new commit {change.slug!r} in slot{slot}.py")
        write_files(self.checkout, change)
        self.user_git("add", "-A")
        self.user_git("commit", "-q", "-m", change.message)
        self.work.append(change)
        self.synced, self.top = False, change.slug

    @precondition(lambda self: self.phase == "clean" and self.work)
    @rule(
        index=st.integers(0, SLOTS - 1), how=st.sampled_from(["fixup", "squash", "fixup-by-commit"])
    )
    def fold(self, index: int, how: str) -> None:
        """An edit committed with --fixup=/--squash= aimed at a patch's commit, or as `fixup!
        <commit>`."""
        # drawn numbers are taken modulo the count: every draw is a valid step
        index %= len(self.work)
        target, change = self.own_commits()[index][0], self.work[index]
        # git writes `fixup! <subject>`: the kit can tell the target only if no other patch's
        # subject starts so
        shared = (
            how != "fixup-by-commit"
            and sum(c.subject.startswith(change.subject) for c in self.work) > 1
        )
        say(
            f"  git commit --{how}={target[:12]} (patch "
            f"{change.slug!r}{', a shared subject' if shared else ''})"
        )
        aim = ("-m", f"fixup! {target}") if how == "fixup-by-commit" else (f"--{how}={target}",)
        self.commit_user_edit(index, *aim)
        self.folds.append((how.split("-")[0], change.slug, shared))
        self.top = change.slug

    @precondition(lambda self: self.phase == "clean" and any(shared for _, _, shared in self.folds))
    @rule()
    def reword_folds(self) -> None:
        """What the kit says when a fold's subject names two patches: reword the fold to `<kind>!
        <commit>`."""
        folds, todo = iter(self.folds), []
        for commit, message in self.commits():
            todo.append(f"pick {commit}")
            if message.startswith(("fixup! ", "squash! ")):
                kind, slug, shared = next(folds)
                find = f"$(git log -1 --format=%H --grep='^Kit-Patch: {slug}$' pristine..HEAD)"
                todo += [f'exec git commit --amend -q -m "{kind}! {find}"'] if shared else []
        self.rebase(todo, new_top=False)
        self.folds = [(kind, slug, False) for kind, slug, _ in self.folds]

    @precondition(lambda self: self.phase == "clean" and self.top in {c.slug for c in self.work})
    @rule()
    def amend(self) -> None:
        """An edit of the patch the top commit belongs to, then git commit --amend --no-edit."""
        self.commit_user_edit([c.slug for c in self.work].index(self.top), "--amend", "--no-edit")

    @precondition(lambda self: self.phase == "clean" and not self.folds and len(self.work) >= 2)
    @rule(first=st.integers(0, SLOTS - 1), second=st.integers(0, SLOTS - 1))
    def reorder(self, first: int, second: int) -> None:
        """Swap two patches with git rebase -i (they own different files: no conflict)."""
        first, second = first % len(self.work), second % len(self.work)
        second = second if second != first else (first + 1) % len(self.work)
        commits = [c for c, _ in self.own_commits()]
        commits[first], commits[second] = commits[second], commits[first]
        self.work[first], self.work[second] = self.work[second], self.work[first]
        self.rebase([f"pick {c}" for c in commits])

    @precondition(lambda self: self.phase == "clean" and not self.folds and len(self.work) >= 2)
    @rule(index=st.integers(1, SLOTS - 1))
    def squash(self, index: int) -> None:
        """git rebase -i: `fixup` work[index] into the patch before it (that patch's message stays)."""
        index = 1 + (index - 1) % (len(self.work) - 1)
        into, gone = self.work[index - 1], self.work.pop(index)
        self.work[index - 1] = replace(into, files=tuple(sorted(into.files + gone.files)))
        self.rebase(
            [
                f"{'fixup' if i == index else 'pick'} {c}"
                for i, (c, _) in enumerate(self.own_commits())
            ]
        )

    @precondition(lambda self: self.phase == "clean" and not self.folds and self.work)
    @rule(index=st.integers(0, SLOTS - 1))
    def remove(self, index: int) -> None:
        """git rebase -i: drop one patch's commit (refresh then needs --drop to agree)."""
        index %= len(self.work)
        del self.work[index]
        self.rebase([f"pick {c}" for i, (c, _) in enumerate(self.own_commits()) if i != index])

    @rule(drop=st.booleans())
    def refresh(self, drop: bool) -> None:
        """refresh, with --drop for each patch the checkout left out when `drop`."""
        before = self.scene()
        self.expect_refresh(self.run_kit("refresh", *self.drops(drop)), before, self.drops(drop))

    def expect_refresh(self, outcome: CompletedProcess, before: Scene, drops: list[str]) -> None:
        if self.phase == "conflict" or (self.phase == "interrupted" and outcome.returncode != 0):
            # an interrupted apply may have stopped before it changed anything
            return self.refused(outcome, before)
        # invariant 2: refused, never folded by a guess
        if any(shared for _, _, shared in self.folds):
            return self.refused(
                outcome, before, needle="" if self.missing() else "patches by subject"
            )
        if self.missing() and not drops:
            return self.refused(outcome, before, needle=f"--drop {self.missing()[0]}")
        self.succeeded(outcome)
        self.exported_now(before)

    def exported_now(self, before: Scene) -> None:
        self.patches_are(self.work, before)
        self.settled(self.work)
        self.hand_edited = None

    def settled(self, changes: list[Change], *, synced: bool = True) -> None:
        """The checkout holds `changes`, as the model's patches/ now does: nothing is pending."""
        self.checkout_is(changes)
        self.work, self.exported, self.folds = list(changes), list(changes), []
        self.synced, self.phase, self.top = synced, "clean", changes[-1].slug if changes else ""

    @rule()
    def apply(self) -> None:
        before = self.scene()
        self.expect_apply(self.run_kit("apply"), before)

    def holds_unexported_work(self) -> bool:
        """The checkout holds work of the user's that patches/ does not: apply must refuse to discard
        it."""
        holds_more = self.work != self.exported or self.folds or self.hand_edited
        return self.phase == "clean" and not self.synced and bool(holds_more)

    def expect_apply(self, outcome: CompletedProcess, before: Scene) -> None:
        if self.phase == "conflict" or self.holds_unexported_work():
            return self.refused(outcome, before)  # it would discard the user's work
        if self.phase == "clean" and not self.synced and outcome.returncode != 0:
            # rewritten commits with the same content: either is fine
            return self.refused(outcome, before)
        self.succeeded(outcome)
        assert snapshot(self.kit.patches) == before.patches, "apply changed patches/"
        self.settled(self.exported)

    @precondition(lambda self: self.phase == "clean" and self.synced and self.exported)
    @rule(index=st.integers(0, SLOTS - 1))
    def break_patch(self, index: int) -> None:
        """The user edits a context line of one patch file by hand; apply stops there, mid-git am."""
        index %= len(self.exported)
        name = file_name(index + 1, self.exported[index])
        path = self.kit.patches / name
        original = path.read_bytes()
        lines = original.decode().split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith(" slot "))
        lines[at] += " (edited by hand)"
        path.write_bytes("\n".join(lines).encode())
        self.hand_edited = (name, original)
        before = self.scene()
        outcome = self.run_kit("apply")
        assert outcome.returncode == 1, f"apply of a broken {name}: {outcome}"
        assert name in last_line(outcome.stderr), (
            f"the conflict should name {name}: {outcome.stderr}"
        )
        assert snapshot(self.kit.patches) == before.patches, "apply changed patches/"
        assert (self.checkout / ".git" / "rebase-apply").is_dir(), (
            "apply stopped without the git am to resolve"
        )
        self.phase = "conflict"

    @precondition(lambda self: self.phase == "conflict")
    @rule()
    def resolve_and_continue(self) -> None:
        """Write what the broken patch meant, git add, apply --continue; refresh must then write it
        back."""
        assert self.hand_edited is not None
        meant = next(
            c for i, c in enumerate(self.exported, 1) if file_name(i, c) == self.hand_edited[0]
        )
        write_files(self.checkout, meant)
        self.user_git("add", "-A")
        before = self.scene()
        self.succeeded(self.run_kit("apply", "--continue"))
        assert snapshot(self.kit.patches) == before.patches, "apply --continue changed patches/"
        self.settled(self.exported, synced=False)

    @precondition(lambda self: self.phase == "conflict")
    @rule()
    def continue_unresolved(self) -> None:
        """apply --continue before anything is resolved: refused, nothing changed."""
        before = self.scene()
        self.refused(self.run_kit("apply", "--continue"), before)

    @precondition(lambda self: self.phase == "conflict")
    @rule()
    def abort(self) -> None:
        """apply --abort goes back to the checkout before that apply; the user restores the patch file."""
        assert self.hand_edited is not None
        before = self.scene()
        self.succeeded(self.run_kit("apply", "--abort"))
        assert snapshot(self.kit.patches) == before.patches, "apply --abort changed patches/"
        name, original = self.hand_edited
        (self.kit.patches / name).write_bytes(original)
        self.hand_edited, self.phase = None, "clean"
        self.checkout_is(self.work)

    @precondition(lambda self: self.phase == "clean")
    @rule(
        command=st.sampled_from(["apply", "refresh"]),
        at=st.sampled_from([0.2, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95]),
    )
    def ctrl_c(self, command: str, at: float) -> None:
        """Ctrl-C (SIGINT to the group) at a drawn fraction of the command's run time, then the
        recovery the kit names. The model's state afterwards is the same whatever the moment (which
        a replay cannot reproduce)."""
        drops = self.drops(command == "refresh")
        before = self.scene()
        outcome = self.run_kit(
            command, *drops, interrupt_after=round(STARTUP + at * DURATION[command], 2)
        )
        # it ended (or refused) before the signal: the usual expectations
        if outcome.returncode not in INTERRUPTED:
            if command == "refresh":
                return self.expect_refresh(outcome, before, drops)
            return self.expect_apply(outcome, before)
        if command == "refresh":
            now = snapshot(self.kit.patches)
            if now != before.patches:  # it swapped the files in: that refresh is whole
                changed = sorted(
                    k
                    for k in now.keys() | before.patches.keys()
                    if now.get(k) != before.patches.get(k)
                )
                say(
                    f"  patches/ was written before the signal ({', '.join(changed)}): nothing to "
                    "redo"
                )
                return self.exported_now(before)
            self.checkout_is(self.work)  # its autosquash may have run; the content is the same
            self.synced = False
            say("  run refresh again, as the kit says")
            return self.expect_refresh(self.run_kit("refresh", *drops), self.scene(), drops)
        assert snapshot(self.kit.patches) == before.patches, "an interrupted apply changed patches/"
        # refused or interrupted, it must not have touched the user's work
        if self.holds_unexported_work():
            return self.unchanged(before)
        self.phase = "interrupted"
        # refuses (the checkout is not whole) or, stopped before any change, succeeds
        self.refresh(drop=True)
        say("  run apply again, as the kit says")
        return self.expect_apply(self.run_kit("apply"), self.scene())

    @precondition(lambda self: self.phase == "clean")
    @rule()
    def keep_own_things(self) -> None:
        """A branch and a tag of the user's at HEAD, and a file in a folder the checkout's exclude
        ignores."""
        self.made += 1
        at, path = self.user_git("rev-parse", "HEAD").strip(), f"notes/n{self.made}.txt"
        self.user_git("branch", f"keep{self.made}", at)
        self.user_git("tag", f"mine{self.made}", at)
        exclude = self.checkout / ".git" / "info" / "exclude"
        if "notes/\n" not in exclude.read_text(encoding="utf-8"):
            exclude.write_text(exclude.read_text(encoding="utf-8") + "notes/\n", encoding="utf-8")
        (self.checkout / "notes").mkdir(exist_ok=True)
        (self.checkout / path).write_bytes(f"note {self.made}\n".encode())
        self.kept_refs |= {f"refs/heads/keep{self.made}": at, f"refs/tags/mine{self.made}": at}
        self.kept_files[path] = f"note {self.made}\n".encode()

    @precondition(lambda self: self.phase == "clean")
    @rule()
    def merge(self) -> None:
        """A side branch merged --no-ff into the series: refresh refuses, naming the merge; the user
        undoes it."""
        at = self.user_git("rev-parse", "HEAD").strip()
        self.user_git("checkout", "-q", "-b", "side", at)
        (self.checkout / "side.txt").write_text("side\n", encoding="utf-8")
        self.user_git("add", "-A")
        self.user_git(
            "commit", "-q", "-m", "[NPU] Side\n\nUpstream-Status: Pending\nKit-Patch: side"
        )
        self.user_git("checkout", "-q", "series")
        self.user_git("merge", "-q", "--no-ff", "-m", "Merge side", "side")
        before = self.scene()
        self.refused(self.run_kit("refresh"), before, needle="is a merge")
        self.user_git("reset", "-q", "--hard", at)
        self.user_git("branch", "-q", "-D", "side")

    @precondition(lambda self: self.phase == "clean")
    @rule(
        key=st.sampled_from(
            ["format.signOff", "diff.noprefix", "core.autocrlf", "commit.gpgSign", "am.threeWay"]
        ),
        command=st.sampled_from(["refresh", "apply"]),
    )
    def checkout_config(self, key: str, command: str) -> None:
        """A setting in the checkout's own .git/config that would shape the kit's output: refused,
        named."""
        self.user_git("config", key, "true")
        before = self.scene()
        self.refused(self.run_kit(command), before, needle=f"sets {key.lower()}")
        self.user_git("config", "--unset-all", key)

    @precondition(
        lambda self: self.phase == "clean"
        and self.synced
        and len(self.exported) >= 2
        and self.work == self.exported
        and not self.folds
        and self.hand_edited is None
    )
    @rule()
    def apply_waits_for_the_lock(self) -> None:
        """apply started while another kit command holds the checkout's lock; meanwhile that command
        takes the last patch out of the series. Once apply has the lock it applies the series as it
        is then (invariant 8)."""
        name = file_name(len(self.exported), self.exported[-1])
        with worklock.locked(
            self.kit.locks / f"{self.checkout.name}.lock", stamp="pid 4242 (kit refresh)", wait_s=0
        ):
            proc = spawn(self.kit, "apply")
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert "waiting for" in first, first
            series = self.kit.patches / "series"
            series.write_text(
                series.read_text(encoding="utf-8").replace(f"{name}\n", ""), encoding="utf-8"
            )
            (self.kit.patches / name).unlink()
        stdout, stderr = proc.communicate(timeout=300)
        self.succeeded(
            judged(
                ("apply",),
                CompletedProcess(("apply",), proc.returncode, first + stdout, stderr),
                None,
            )
        )
        self.settled(self.exported[:-1])

    @precondition(lambda self: self.phase == "clean")
    @rule(command=st.sampled_from(["apply", "refresh"]), at=st.sampled_from([0.2, 0.5, 0.8, 0.95]))
    def kill_9(self, command: str, at: float) -> None:
        """SIGKILL to the whole process group (kit and gits at once) at a drawn fraction of the
        command's run time, then the same command again: it heals what the killed one left (its
        locks, its paused rebase, a record it did not write) and ends as if the killed run had not
        happened, or had finished."""
        drops = self.drops(command == "refresh")
        before = self.scene()
        moment = round(STARTUP + at * DURATION[command], 2)
        proc = spawn(self.kit, command, *drops, signal_after=(moment, signal.SIGKILL))
        stdout, stderr = proc.communicate()
        killed = proc.returncode == -signal.SIGKILL
        say(
            f"  kit {command} killed (SIGKILL to its group) after {at} of its run time: exit "
            f"{proc.returncode}"
        )
        if command == "refresh":
            if not killed:  # it ended (or refused) before the signal: the usual expectations hold
                outcome = judged(
                    (command, *drops),
                    CompletedProcess(command, proc.returncode, stdout, stderr),
                    None,
                )
                return self.expect_refresh(outcome, before, drops)
            # it swapped its files in: that refresh is whole
            if snapshot(self.kit.patches) != before.patches:
                say("  it wrote patches/ before it died: the next refresh records it")
                self.succeeded(self.run_kit("refresh"))
                return self.exported_now(before)
            return self.expect_refresh(self.run_kit("refresh", *drops), before, drops)
        assert snapshot(self.kit.patches) == before.patches, "a killed apply changed patches/"
        # refused before any change, or killed before it could refuse
        if self.holds_unexported_work():
            return self.unchanged(before)
        self.phase = "interrupted" if killed else self.phase
        return self.expect_apply(self.run_kit("apply"), self.scene())

    @invariant()
    def the_users_own_things_survive(self) -> None:
        """Invariant 7: the user's branches, tags and ignored files are where they were, byte for byte."""
        for ref, commit in self.kept_refs.items():
            assert self.user_git("rev-parse", "-q", "--verify", ref).strip() == commit, (
                f"{ref} is gone or moved"
            )
        for path, data in self.kept_files.items():
            assert (self.checkout / path).is_file() and (
                self.checkout / path
            ).read_bytes() == data, f"{path} lost"

    @invariant()
    def no_paused_operation_the_user_did_not_start(self) -> None:
        paused = [entry for entry in PAUSED if (self.checkout / ".git" / entry).exists()]
        allowed = ["rebase-apply"] if self.phase == "conflict" else []
        assert paused == allowed, (
            f"paused git operation(s) in the checkout: {paused} (phase {self.phase})"
        )

    @invariant()
    def patches_folder_holds_no_temporary_files(self) -> None:
        stray = [p.name for p in self.kit.patches.iterdir() if p.name.startswith(".")]
        assert not stray, f"left in patches/: {stray}"


PROFILE = os.environ.get("KIT_MODEL_PROFILE", "small")
if PROFILE not in PROFILES:
    raise pytest.UsageError(
        f"KIT_MODEL_PROFILE={PROFILE!r} is not a profile: use one of {', '.join(PROFILES)}"
    )
EditLoop.TestCase.settings = PROFILES[PROFILE]
if PROFILE == "small":
    seed(SMALL_SEED)(EditLoop)
TestEditLoop = EditLoop.TestCase


def test_the_weekly_workflow_runs_the_long_profile() -> None:
    weekly = (KIT_ROOT / ".github" / "workflows" / "weekly.yml").read_text(encoding="utf-8")
    job = weekly.split("\n  edit-loop-model:\n", 1)[1]
    assert "KIT_MODEL_PROFILE: long" in job and "tests/kit/test_edit_loop_model.py" in job
    assert set(PROFILES) == {"small", "long"}


BITES = [
    pytest.param(
        "scripts/checkout/refresh.py",
        "(patches_dir / name).unlink(missing_ok=True)",
        "pass",
        [("remove", {"index": 1}), ("refresh", {"drop": True})],
        "patches/ holds",
        id="refresh-keeps-a-dropped-file",
    ),
    pytest.param(
        "scripts/gitcmd.py",
        '"--zero-commit",',
        "",
        [("new_commit", {"subject": "x"}), ("refresh", {"drop": False})],
        "rewritten although nothing changed",
        id="refresh-rewrites-untouched-patches",
    ),
    pytest.param(
        "scripts/report.py",
        "def fail(message: str) -> None:\n",
        "def fail(message: str) -> None:\n    print('warning', file=sys.stderr)\n",
        [("new_commit", {"subject": "x"}), ("apply", {})],
        "exactly one line",
        id="a-refusal-in-two-lines",
    ),
]


@pytest.mark.parametrize(("path", "old", "new", "steps", "needle"), BITES)
def test_the_machine_bites(
    path: str, old: str, new: str, steps: list[tuple[str, dict]], needle: str
) -> None:
    """The same steps on a kit broken on purpose (in the example's copy): the machine must object."""
    machine = EditLoop()
    try:
        source = machine.kit.root / path
        assert old in source.read_text(encoding="utf-8")
        source.write_text(source.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
        machine.own_code = True
        with pytest.raises(AssertionError, match=needle):
            for name, kwargs in steps:
                getattr(machine, name)(**kwargs)
    finally:
        machine.teardown()
