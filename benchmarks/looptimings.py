"""Timings of the edit-test loop, here and at a baseline revision (never asserted in tests).

    nox -s timings -- --loop BASELINE [--repeat N]

Each kit copy reuses this checkout's leg envs and wheel: a first `nox -s apply test`, warm
re-runs, then a one-line edit of patch 0001 followed by `nox -s refresh test` (with
`-- --changed` for this checkout). Prints each run's wall and CPU seconds, and ratios.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import gitcmd
from scripts.report import progress, table
from scripts.workspace import Workspace


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kit: error: {' '.join(cmd[2:])} failed in the timing copy:\n{proc.stderr}")
    return time.monotonic() - started


LOOP_PARTS = ("scripts", "ci", "patches", "tests", "noxfile.py", "pytest.ini", "ruff.toml")
EDIT_0001 = "# (S, D/2) cos/sin: broadcast over batch and heads"


def loop_kit(ws: Workspace, dest: Path, revision: str | None) -> Path:
    """A copy of the kit (working tree, or `revision` from git) with this checkout's wheel.

    The working tree's copy links this checkout's leg envs (they must be ready: a rebuild through
    the link would replace them). A revision gets envs of its own, built by its first run: its pins
    or its env stamp may differ from today's, and sharing would rebuild ours.
    """
    dest.mkdir(parents=True)
    if revision:
        subprocess.run(["tar", "-x"], input=gitcmd.archive(ws.root, revision), cwd=dest, check=True)
    else:
        for part in LOOP_PARTS:
            src = ws.root / part
            if src.is_dir():
                shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.is_file():
                shutil.copy2(src, dest / part)
    (dest / ".work" / "downloads").mkdir(parents=True)
    for wheel in ws.downloads.glob("vllm_omni-*.whl"):
        shutil.copy2(wheel, dest / ".work" / "downloads" / wheel.name)
    if revision:
        return dest
    (dest / ".work" / "envs").symlink_to(ws.envs.resolve(), target_is_directory=True)
    probe = (
        "from scripts.legs import legenv; from scripts.workspace import Workspace; "
        "print(all(legenv.is_ready(Workspace('.'), leg) for leg in legenv.LEGS))"
    )
    ready = subprocess.run([sys.executable, "-c", probe], cwd=dest, capture_output=True, text=True)
    if ready.stdout.strip() != "True":
        raise SystemExit(f"kit: error: the leg envs are not ready for the copy ({ready.stderr.strip()[-200:]}) -- "
                         "run python -m scripts legenv stock and npu first")  # fmt: skip
    return dest


def timed_cpu(cmd: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, CPU s of the children, 1-minute load average at the start) of one command that must pass."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    wall = timed(cmd, cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), load


def edit_patch_0001(kit: Path, round_no: int) -> None:
    """A one-line edit to patch 0001 in the checkout, committed as a fixup of its commit (refresh folds it)."""
    checkout = kit / ".work" / "vllm-omni"
    rope = checkout / "vllm_omni" / "diffusion" / "layers" / "rope.py"
    text = rope.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if "cos/sin: broadcast over batch and heads" in x)
    rope.write_text(text.replace(line, line.split("#")[0] + f"{EDIT_0001} (edit {round_no})"), encoding="utf-8")
    target = gitcmd.commits_matching(checkout, "^Kit-Patch: rope-2d-cos-sin$")[0]
    gitcmd.fixup_commit(checkout, target)  # committed as the kit (its own checkout), like the fixups it folds


def loop_timings(
    ws: Workspace, revision: str | None, repeat: int, changed: bool
) -> list[tuple[str, list[tuple[float, float, float]]]]:
    """[(step, [(wall, cpu, load)...])] for one kit: a first full run, warm full runs, edit-then-test runs."""
    nox = [sys.executable, "-m", "nox", "--no-color"]
    label = revision or "this checkout"
    with tempfile.TemporaryDirectory(prefix="kit-loop-") as tmp:
        kit = loop_kit(ws, Path(tmp) / "kit", revision)
        what = "first run (fills what it caches" + ("" if revision is None else ", builds its envs") + ")"
        progress(f"[{label}] nox -s apply test: {what}")
        first = [timed_cpu([*nox, "-s", "apply", "test"], kit)]
        full = []
        for n in range(repeat):
            progress(f"[{label}] nox -s apply test: warm, {n + 1}/{repeat}")
            full.append(timed_cpu([*nox, "-s", "apply", "test"], kit))
        edited = []
        refresh_test = [*nox, "-s", "refresh", "test", *(["--", "--changed"] if changed else [])]
        for n in range(repeat):
            edit_patch_0001(kit, n)
            progress(f"[{label}] one-line edit to patch 0001, then nox {' '.join(refresh_test[4:])}: {n + 1}/{repeat}")
            edited.append(timed_cpu(refresh_test, kit))
    step = "refresh test -- --changed" if changed else "refresh test (full; no --changed)"
    return [("apply test, first", first), ("apply test, warm", full), (f"edit 0001, {step}", edited)]


def spread(runs: list[tuple[float, float, float]]) -> tuple[str, str, str, str]:
    walls, cpus = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
    loads = ", ".join(f"{r[2]:.1f}" for r in runs)
    shown = " / ".join(f"{w:.1f}" for w in walls)
    return shown, f"{statistics.median(walls):.1f}", f"{statistics.median(cpus):.1f}", loads


def knows_changed(ws: Workspace, revision: str) -> bool:
    """Whether the kit at `revision` has `test --changed` (older ones time the full refresh test)."""
    return gitcmd.grep_found(ws.root, revision, '"--changed"', "scripts")


def loop_main(ws: Workspace, baseline: str, repeat: int) -> int:
    """`python -m benchmarks.timings --loop`: the edit-test loop before (baseline revision) and after."""
    cores = os.cpu_count()
    progress(f"{cores} cores; load average now {os.getloadavg()[0]:.1f} (the figures vary with it)")
    after = loop_timings(ws, None, repeat, changed=True)
    before = loop_timings(ws, baseline, repeat, changed=knows_changed(ws, baseline))
    rows = [(f"before ({baseline})", step, *spread(runs)) for step, runs in before]
    rows += [("after (this checkout)", step, *spread(runs)) for step, runs in after]
    print(table(["kit", "step", "wall s (each run)", "wall median", "CPU s median", "load avg at start"], rows))
    ratios = [(b[0], f"{statistics.median(r[0] for r in b[1]) / statistics.median(r[0] for r in a[1]):.1f}x",
               f"{statistics.median(r[1] for r in b[1]) / statistics.median(r[1] for r in a[1]):.1f}x")
              for b, a in zip(before[1:], after[1:], strict=True)]  # fmt: skip
    print(table(["step", "before/after wall", "before/after CPU"], ratios))
    return 0
