"""`python -m scripts pr --check-stack`: the stack's invariants, checked alone (nothing is made).

Per PR, on the pristine plus only the PRs before it and its own (the tree upstream will hold once
it merges): its size against upstream's 500-line threshold (or its over_limit), no test of it using
a name only a later PR adds (scripts/pr/stack.py says how that is found), and its own added tests
run in each leg (stock: stock torch, no torch_npu; npu: the pinned torch_npu, real or simulated),
in the legs' own interpreters (scripts/legs). The series' gates run in `nox -s pr`'s precheck on
the whole series; a PR's lines are a subset of those, so a finding of a gate on a PR's lines shows
there. The result per PR is recorded in .work/records/stack-check.json for this series and stack
(the PR bodies quote it); a PR with no test of its own is recorded as not run, never as passed.

`nox -s pr` runs the size and later-PR checks on every run; the test runs (minutes per PR and leg)
are what this check records: before a push, `pr` needs that record to be of the current series and
stack with every PR's tests passed, and runs the check itself when it is not. A body without such
a record says "not run" with the command.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from scripts import gitcmd, records
from scripts.legs import suite, upstream_tests
from scripts.pr import rangediff, stack
from scripts.report import progress, table
from scripts.workspace import Workspace

LEGS = ("stock", "npu")
# (workspace, leg, the PR's prefix tree, its test files) -> (passed, what ran, in a few words)
# (typed loosely: a module-level alias naming the workspace reads as a location fixed at import)
Runner = Callable[..., tuple[bool, str]]


def leg_runner(ws: Workspace, leg: str, tree: Path, tests: Sequence[str]) -> tuple[bool, str]:
    """The PR's own tests on its prefix tree in the leg's interpreter, as the leg runs the suite."""
    out = ws.records / f"stack-check-{leg}"
    python, mode, _, env = suite.prepare(ws, leg, out, None)
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    env = {**env, "KIT_CHECKOUT": str(tree), "PYTHONPATH": str(tree)}
    # A tree without pytest settings of its own (the release wheel's) must not pick up the kit's,
    # found above it: its tests run under upstream's markers, unregistered there, as warnings.
    own = any((tree / name).is_file() for name in ("pyproject.toml", "pytest.ini", "setup.cfg"))
    config = [] if own else ["-c", os.devnull, "--rootdir", str(tree)]
    # the leg's bootstrap (upstream_tests.BOOTSTRAP) prepares the process as the leg's suite is
    # (the simulated NPU in the npu leg), then runs pytest
    bootstrap = ws.root / upstream_tests.BOOTSTRAP
    cmd = [str(python), str(bootstrap), "-m", "pytest", *config, *tests, *suite.PLUGINS_OFF]
    cmd += [f"--junitxml={junit}", "-q"]
    rc = subprocess.run(cmd, cwd=tree, env=env).returncode
    if not junit.is_file():
        return False, f"pytest exited {rc} without a report (leg {leg})"
    counts = suite.counts_from_junit(junit.read_text(encoding="utf-8"))
    ran = ", ".join(f"{getattr(counts, k)} {k}" for k in ("passed", "failed", "errors", "skipped"))
    passed = rc == 0 and counts.passed > 0 and not counts.failed and not counts.errors
    return passed, f"leg {leg} (mode {mode}): {ran}"


def own_tests(
    ws: Workspace,
    declared: stack.Stack,
    digest: str,
    tips: Sequence[str],
    legs: Sequence[str] = LEGS,
    runner: Runner = leg_runner,
) -> tuple[list[tuple[object, ...]], list[str]]:
    """Each PR's own tests on its base (tips[k]: PR k's prefix) in each leg, recorded for this
    series and stack: (table rows, problems). A PR with no test of its own is not run, and not
    recorded as a pass."""
    rows, results, problems = [], {}, []
    for pr, tip in zip(declared.prs, tips, strict=True):
        tests = stack.own_test_files(pr)
        n = stack.size(pr)
        limit = "over, says why" if pr.over_limit and n > 500 else "over" if n > 500 else "ok"
        if not tests:
            rows.append((pr.index, pr.name, n, limit, "no test of its own: not run"))
            continue
        verdicts = []
        with rangediff.scratch_tree(ws.checkout, ws.work / ".pr-stack-check") as tree:
            gitcmd.detach(tree, tip, force=True)
            for leg in legs:
                progress(f"PR {pr.name}: its own tests on its base, leg {leg}")
                verdicts.append(runner(ws, leg, tree, tests))
        passed = all(ok for ok, _ in verdicts)
        summary = "; ".join(text for _, text in verdicts)
        results[pr.name] = {"tests": tests, "passed": passed, "summary": summary}
        rows.append((pr.index, pr.name, n, limit, ("passed: " if passed else "FAILED: ") + summary))
        if not passed:
            problems.append(f"PR {pr.name!r}: its own tests fail on its base: {summary}")
    if results:
        records.write(
            ws.records,
            stack.CHECK_RECORD,
            {"series_digest": digest, "stack_digest": declared.digest, "prs": results},
        )
    return rows, problems


def checked(ws: Workspace, declared: stack.Stack, digest: str) -> bool:
    """Whether the stack check's record is of this series and stack, with every PR's tests passed."""
    r = records.read(ws.records, stack.CHECK_RECORD)
    if not r or (r.get("series_digest"), r.get("stack_digest")) != (digest, declared.digest):
        return False
    done = r.get("prs") or {}
    want = [pr.name for pr in declared.prs if stack.own_test_files(pr)]
    return all(isinstance(done.get(n), dict) and done[n].get("passed") is True for n in want)


def before_push(
    ws: Workspace, declared: stack.Stack, digest: str, tips: Sequence[str]
) -> list[str]:
    """The invariants that need test runs, checked before anything is pushed: a passing record of
    this series and stack stands; without one the check runs now."""
    if checked(ws, declared, digest):
        progress("stack: each PR's own tests passed on its base (recorded for this stack)")
        return []
    progress("stack: no passing check of this stack recorded: running it before the push")
    return own_tests(ws, declared, digest, tips)[1]


def report(rows: Sequence[tuple[object, ...]], problems: Sequence[str], prs: int) -> int:
    """The check's table and verdict: 0 when every invariant holds, 1 when a PR breaks one."""
    print(table(["#", "PR", "changed lines", "500-line limit", "own tests on its base"], rows))
    for line in problems:
        print(line)
    if problems:
        progress(f"stack: {len(problems)} problem(s) (nothing is sent until they are fixed)")
        return 1
    progress(f"stack: {prs} PR(s), every invariant holds")
    return 0
