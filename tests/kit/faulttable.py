"""The fault tables' contract and their shared setups (test_faults*.py, test_apply_refresh.py import
them).

A row drives the real CLI on a small upstream (kit3: three patches, the first two in rope.py) and
asserts the contract: the exit code, one line naming the thing and the fix, no traceback, and
nothing lost (patches/ byte-identical, the user's own files kept). Faults that cannot be produced
for real here (a full disk, a signal at an exact instant) are injected at the one call they hit, in
a real kit process (`inject`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conftest import AUTHOR, FRONT_DOOR, SMALL_UPSTREAM, Kit, build_wheel, pin_toml, rope_with

from scripts.gitcmd import git

Env = dict[str, str]
Setup = Callable[[Kit, Path], Env | None]  # may return environment variables for the run
# a row's own checks after the contract
Then = Callable[[Kit, subprocess.CompletedProcess[str]], None]
C_LOCALE = {
    "LC_ALL": "C",
    "LANG": "C",
    "PYTHONCOERCECLOCALE": "0",
    "PYTHONUTF8": "0",
    "PYTHONIOENCODING": "",
}
NOTES = "a user's notes\n"


# ---- the contract and the runner ----


def state_of(kit: Kit) -> dict[str, object]:
    return json.loads((kit.checkout / ".git/kit-state.json").read_text(encoding="utf-8"))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and proc.returncode == code, out
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("kit: error: "), proc.stderr
    assert " -- " in errors[0] and needle in errors[0], errors[0]  # the thing, then the fix


def check(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """one_line_error, or for code 0: the work succeeded, needle in its output and no error line."""
    if code:
        one_line_error(proc, code, needle)
        return
    out = proc.stdout + proc.stderr
    assert (
        proc.returncode == 0
        and "Traceback" not in out
        and "kit: error:" not in out
        and needle in out
    ), out


def popen(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CI": ""}
    return subprocess.Popen(
        cmd, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def finished(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def inject(
    kit: Kit, code: str, *args: str, env: Env | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real kit CLI after `code` has replaced one filesystem call (the fault's only stand-in)."""
    argv = [sys.executable, "-c", f"import errno, os, signal, sys\n{code}\n" + FRONT_DOOR, *args]
    env = {**os.environ, "CI": "", **(env or {})}
    return subprocess.run(argv, cwd=kit.root, capture_output=True, text=True, env=env)


@dataclass(frozen=True)
class Row:
    """One fault: the command, what it must say, after setup (which may return environment variables
    for the run)."""

    id: str
    args: str | tuple[str, ...]  # a string is split on spaces
    needle: str  # in the one error line, or (code 0) in the output
    setup: Setup = lambda _kit, _tmp: None
    code: int = 2  # 0: the work must succeed
    env: Env | None = None
    inject: str = ""  # code that replaces one call in the kit process (see inject)
    patches_kept: bool = True  # patches/ byte-identical after the run
    then: Then | None = None  # what this row pins beyond the contract

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.args.split()) if isinstance(self.args, str) else self.args


def run_row(kit: Kit, row: Row, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Set the row up, run it, check its output and (unless the row writes it) that patches/ is
    byte-identical."""
    env = {**(row.env or {}), **(row.setup(kit, tmp_path) or {})}
    before = snapshot(kit.patches)
    try:
        if row.inject:
            proc = inject(kit, row.inject, *row.argv, env=env)
        else:  # a C locale takes effect at an interpreter's start only
            proc = (kit.spawn if any(k in env for k in C_LOCALE) else kit.run)(*row.argv, env=env)
    finally:
        release()
    check(proc, row.code, row.needle)
    assert not row.patches_kept or snapshot(kit.patches) == before
    if row.then is not None:
        row.then(kit, proc)
    return proc


# ---- setups: files of the kit, a new pin, the lock ----


def pin_files(kit: Kit, tmp_path: Path, files: dict[str, bytes]) -> None:
    """Pin the kit to a 0.2.0 holding SMALL_UPSTREAM plus files (any bytes: zipfile writes str or
    bytes)."""
    where = tmp_path / "release-0.2.0"
    where.mkdir(exist_ok=True)
    wheel, digest = build_wheel(where, {**SMALL_UPSTREAM, **files}, "0.2.0")  # type: ignore[dict-item]
    kit.write_pin(pin_toml("0.2.0", wheel.name, digest))
    kit.seed_wheel(wheel)


def new_upstream(kit: Kit, tmp_path: Path, rope: dict[int, str]) -> None:
    """Pin the kit to a 0.2.0 whose rope.py differs from 0.1.0 at the given lines."""
    pin_files(kit, tmp_path, {"vllm_omni/layers/rope.py": rope_with(rope).encode()})


def moved(rope: dict[int, str]) -> Setup:
    return lambda kit, tmp_path: new_upstream(kit, tmp_path, rope)


def lock_wait(seconds: str) -> Env:
    return {"KIT_LOCK_TIMEOUT": seconds}


def edit(path: str, change: Callable[[bytes], bytes]) -> Setup:
    def setup(kit: Kit, _tmp: Path) -> None:
        (kit.root / path).write_bytes(change((kit.root / path).read_bytes()))

    return setup


def put(path: str, data: bytes) -> Setup:
    def setup(kit: Kit, _tmp: Path) -> None:
        (kit.root / path).parent.mkdir(parents=True, exist_ok=True)
        (kit.root / path).write_bytes(data)

    return setup


def replaced(path: str, old: bytes, new: bytes, count: int = -1) -> Setup:
    return edit(path, lambda b: b.replace(old, new, count))


P1, P3, SERIES = "patches/0001-fix-ten.patch", "patches/0003-double-attn.patch", "patches/series"
P2_STOPS = "0002-twenty.patch does not apply"  # patch 0002 on a moved upstream
CHECKOUT, PIN = ".work/vllm-omni", "patches/upstream.toml"
STATE = f"{CHECKOUT}/.git/kit-state.json"


def interrupted_apply(kit: Kit, _tmp: Path) -> None:
    """What Ctrl-C after the first patch leaves: the state says applying, HEAD holds one patch."""
    state = state_of(kit)
    kit.git("reset", "-q", "--hard", "pristine")
    kit.git("am", "-q", "-k", str(kit.patches / "0001-fix-ten.patch"))
    (kit.checkout / ".git/kit-state.json").write_text(
        json.dumps({**state, "status": "applying", "head": ""})
    )


def commit_bytes(kit: Kit, edits: dict[str, bytes], slug: str) -> None:
    for name, data in edits.items():
        (kit.checkout / name).write_bytes(data)
    kit.git("add", "-A")
    kit.git(
        "commit",
        "-q",
        "-m",
        f"[NPU] {slug.title()}\n\nUpstream-Status: Pending\nKit-Patch: {slug}\n",
    )


def lock_held(kit: Kit, _tmp: Path) -> None:
    lock = kit.root / ".work/locks/vllm-omni.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock, "w")  # noqa: SIM115 -- held until release()
    handle.write("pid 4242 (kit refresh)\n")
    handle.flush()
    fcntl.flock(handle, fcntl.LOCK_EX)
    HELD.append(handle)


HELD: list[object] = []


def release() -> None:
    while HELD:
        HELD.pop().close()  # type: ignore[attr-defined]


# ---- setups: commits in the checkout ----

ATTN, ROPE = "vllm_omni/attn.py", "vllm_omni/layers/rope.py"


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def steps(*actions: dict[str, str | bytes] | tuple[str, ...] | str | Setup) -> Setup:
    """In order: files written into the checkout (a dict), a git command in it (a tuple), a kit command
    (a str), another setup (a callable)."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        for action in actions:
            if isinstance(action, dict):
                write_files(kit.checkout, action)
            elif isinstance(action, tuple):
                kit.git(*action)
            elif isinstance(action, str):
                kit.run(action, check=True)
            else:
                action(kit, tmp_path)

    return setup


def commit(files: dict[str, str | bytes], text: str, slug: str, *then: str) -> Setup:
    return steps(
        files,
        ("add", "-A"),
        ("commit", "-q", "-m", f"{text}\n\nUpstream-Status: Pending\nKit-Patch: {slug}"),
        *then,
    )


def sha_of(kit: Kit, slug: str) -> str:
    return kit.git(
        "log", "-1", "--format=%H", f"--grep=^Kit-Patch: {slug}$", "pristine..HEAD"
    ).strip()


def fixup(slug: str, edits: dict[str, str], kind: str = "fixup", *, add: bool = False) -> Setup:
    """`git commit --fixup=<commit>` (or --squash / --fixup=amend:) aimed at slug's commit; add: new
    files too."""

    def setup(kit: Kit, _tmp: Path) -> None:
        write_files(kit.checkout, edits)
        if add:
            kit.git("add", "-A")
        target = sha_of(kit, slug)
        option = {
            "fixup": f"--fixup={target}",
            "squash": f"--squash={target}",
            "amend": f"--fixup=amend:{target}",
        }
        git(
            "commit",
            "-qa",
            option[kind],
            *(["-m", "more"] if kind == "squash" else []),
            cwd=kit.checkout,
            env={**AUTHOR, "GIT_EDITOR": "sed -i 's/^Why this change.$/Why, amended./'"},
        )

    return setup


PAUSED = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD")


def paused(kit: Kit) -> list[str]:
    return [e for e in PAUSED if (kit.checkout / ".git" / e).exists()]


EXTRA = {"vllm_omni/extra.py": "x = 1\n"}
