"""Upstream's pre-commit gate, run offline: the hooks of ci/upstream-hooks.toml on the files the series touches.

pre-commit itself would clone each hook's repository from GitHub; the kit runs the hooks' own registry
packages at upstream's versions instead (installed by `nox -s lint` from the same table). A fixing hook
runs on a scratch copy of the touched files (nothing in the checkout changes) and each line it would
change is a finding; a checking hook's `path:line` output is. Findings are named by upstream's hook id
and count when they sit on a line the series adds; the rest are upstream's own (shown, not counted).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import tomllib

from scripts import childenv
from scripts.errors import KitError

TYPES = {"yaml": re.compile(r"\.ya?ml$"), "python": re.compile(r"\.pyi?$")}  # "text": any file without NUL bytes
# Where a checking hook names a line: `path:12:...` (typos, debug-statements) or `in "path", line 12` (check-yaml);
# or only a file: `path - Could not parse ast` (debug-statements on a file that does not parse): line 1 stands for it.
LOCATED = (
    re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):"),
    re.compile(r'in "(?P<path>[^"]+)", line (?P<line>\d+)'),
    re.compile(r"^(?P<path>\S.*?) - "),
)
RUNS = ("fixer", "checker", "ruff", "no")


class HooksError(KitError):
    """ci/upstream-hooks.toml cannot be read, or a hook cannot be run."""


@dataclass(frozen=True)
class Hook:
    id: str
    repo: str
    run: str  # one of RUNS
    rev: str = ""  # "" for upstream's local hooks
    package: str = ""
    entry: str = ""
    args: tuple[str, ...] = ()
    kit_args: tuple[str, ...] = ()
    types: str = ""
    files: str = ""
    exclude: str = ""
    why: str = ""  # run = "no": why it cannot run here
    stand_in: str = ""  # run = "no": what mirrors it

    @property
    def version(self) -> str:
        return self.package.partition("==")[2] or self.rev or "local"

    def sees(self, path: str, data: bytes) -> bool:
        """Whether pre-commit would pass this file to the hook (its types, files and exclude)."""
        if self.files and not re.search(self.files, path):
            return False
        if self.exclude and re.search(self.exclude, path):
            return False
        if self.types == "text":
            return b"\0" not in data
        return not self.types or bool(TYPES[self.types].search(path))


@dataclass(frozen=True)
class HookFinding:
    hook: str
    file: str
    line: int
    message: str


def parse_hooks(text: str, source: str = "ci/upstream-hooks.toml") -> tuple[Hook, ...]:
    try:
        rows = tomllib.loads(text)["hook"]
        hooks = tuple(Hook(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}) for row in rows)
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise HooksError(f"{source} is malformed ({exc})", "restore it from git") from None
    for hook in hooks:
        if hook.run not in RUNS or (hook.run in ("fixer", "checker") and not (hook.entry and hook.package)):
            raise HooksError(f"{source}: hook {hook.id} has run = {hook.run!r} without what it needs",
                             f"run is one of {', '.join(RUNS)}; fixer and checker need entry and package")  # fmt: skip
        if hook.types and hook.types != "text" and hook.types not in TYPES:
            raise HooksError(f"{source}: hook {hook.id} has unknown types {hook.types!r}",
                             f"use one of text, {', '.join(TYPES)}")  # fmt: skip
    return hooks


def load_hooks(path: Path) -> tuple[Hook, ...]:
    return parse_hooks(path.read_text(encoding="utf-8"))


def packages(hooks: Iterable[Hook]) -> list[str]:
    """The registry packages that run the hooks (what the lint session installs), each once."""
    return list(dict.fromkeys(h.package for h in hooks if h.package and h.run != "no"))


def hook_version(hooks: Iterable[Hook], hook_id: str) -> str:
    """The version upstream pins for one hook (e.g. ruff-check's ruff)."""
    found = [h.version for h in hooks if h.id == hook_id]
    if not found:
        raise HooksError(f"ci/upstream-hooks.toml has no hook {hook_id}", "restore it from git")
    return found[0]


def changed_lines(before: str, after: str) -> list[int]:
    """1-based lines of before that a fixer changed (a line it appended counts as the last line)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines: list[int] = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            lines += range(i1 + 1, i2 + 1) if i2 > i1 else [max(i1, 1)]
    return sorted(set(lines))


def located(output: str, files: Iterable[str]) -> list[tuple[str, int, str]]:
    """(file, line, message) of each output line that names one of files and a line."""
    names = set(files)
    found = []
    for text in output.splitlines():
        for pattern in LOCATED:
            m = pattern.search(text)
            if m and m["path"] in names:
                found.append((m["path"], int(m.groupdict().get("line") or 1), text.strip()))
                break
    return found


def message(output_line: str, path: str, line: int) -> str:
    """A hook's output line without its own `path:line:col:` (or `path - `) and `error:` prefixes."""
    text = re.sub(rf"^{re.escape(path)}(:{line}:(\d+:)?| - )\s*", "", output_line)
    return re.sub(r"^error:\s*", "", text)


def executable(name: str, bin_dir: Path | None) -> str:
    """The hook's program: from bin_dir (the lint session's venv) when given, else from PATH or beside the
    interpreter running the kit (a venv's python run by path has its programs there, not on PATH)."""
    path = str(bin_dir) if bin_dir else os.pathsep.join([os.environ.get("PATH", ""), sysconfig.get_path("scripts")])
    found = shutil.which(name, path=path)
    if found is None:
        where = f"in {bin_dir}" if bin_dir else "on PATH"
        raise HooksError(f"{name} (upstream's pre-commit hook) was not found {where}",
                         "run nox -s lint (it installs upstream's hook packages), or pass --hooks-bin DIR")  # fmt: skip
    return found


def run_hook(hook: Hook, tree: Path, files: list[str], bin_dir: Path | None, ci_dir: Path) -> list[HookFinding]:
    """One fixer or checker on files of tree (a scratch copy: the tree is never changed)."""
    with tempfile.TemporaryDirectory(prefix="kit-hook-") as tmp:
        scratch = Path(tmp) / "tree"  # beside an empty home for the hook (childenv.tool_env)
        scratch.mkdir()
        for name in files:
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / name, scratch / name)
        args = [a.replace("{ci}", str(ci_dir)) for a in hook.args]  # the kit's config files, by absolute path
        argv = [executable(hook.entry, bin_dir), *args, *hook.kit_args, *files]
        env = childenv.encoded_env(childenv.tool_env(Path(tmp) / "home"))
        proc = subprocess.run(childenv.encoded_argv(argv), cwd=scratch, env=env, capture_output=True,
                              encoding="utf-8", errors="replace")  # fmt: skip
        if hook.run == "fixer":
            found = []
            for name in files:
                before = (tree / name).read_bytes().decode("utf-8", "surrogateescape")  # line endings as they are
                after = (scratch / name).read_bytes().decode("utf-8", "surrogateescape")
                found += [HookFinding(hook.id, name, n, f"{hook.id} would change this line") for n in
                          changed_lines(before, after)]  # fmt: skip
            return found
        hits = located(proc.stdout + proc.stderr, files)
        if proc.returncode != 0 and not hits:
            said = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise HooksError(f"{hook.id} ({hook.entry}) exited {proc.returncode} naming no line: {said[0]}",
                             f"run it by hand in .work/vllm-omni: {hook.entry} {' '.join(files)}")  # fmt: skip
        return [HookFinding(hook.id, f, n, message(msg, f, n)) for f, n, msg in hits]


@dataclass(frozen=True)
class GateResult:
    counted: list[HookFinding]  # on lines the series adds
    pre_existing: list[HookFinding]  # on upstream's own lines: shown, not counted
    rows: list[tuple[str, str, str]]  # (hook id, version, what happened)


def judge(found: list[HookFinding], added: Mapping[str, set[int]], new_files: set[str]) -> tuple[list, list]:
    """(counted, pre-existing): a finding counts on an added line or in a file the series adds."""
    counted = [f for f in found if f.file in new_files or f.line in added.get(f.file, set())]
    return counted, [f for f in found if f not in counted]


def run_gate(hooks: Iterable[Hook], tree: Path, touched: Mapping[str, set[int]], new_files: set[str],
             bin_dir: Path | None, ci_dir: Path) -> GateResult:  # fmt: skip
    """Every runnable fixer and checker of hooks on the files of touched (path -> added lines) present in tree.
    A hook that cannot run here and has no stand-in fails as unchecked when the series touches a file it sees."""
    present = {p: (tree / p).read_bytes() for p in touched if (tree / p).is_file()}
    counted: list[HookFinding] = []
    pre: list[HookFinding] = []
    rows = []
    for hook in hooks:
        files = sorted(p for p, data in present.items() if hook.sees(p, data))
        if hook.run == "no":
            if files and not hook.stand_in:
                counted += [HookFinding(hook.id, f, 1, f"unchecked: {hook.why}") for f in files]
            note = f"not run: {hook.why}" + (f" (stand-in: {hook.stand_in})" if hook.stand_in else "")
            rows.append((hook.id, hook.version, note))
            continue
        if hook.run == "ruff":
            rows.append((hook.id, hook.version, f"the ruff step below, on {len(files)} file(s)"))
            continue
        mine, theirs = judge(run_hook(hook, tree, files, bin_dir, ci_dir) if files else [], touched, new_files)
        counted += mine
        pre += theirs
        rows.append((hook.id, hook.version, f"{len(mine)} finding(s) on {len(files)} file(s)"))
    return GateResult(counted, pre, rows)
