"""Upstream's pre-commit gate, run offline: the hooks of the target tree's `.pre-commit-config.yaml`
(scripts/checks/precommit.py reads it) or, for the release wheel, which ships none,
ci/upstream-hooks.toml.

pre-commit itself would clone each hook's repository from GitHub; the kit runs the hooks' own
registry packages at the config's versions instead, and a tree's `repo: local` hooks from the tree's
own files. Every hook runs on a scratch copy (nothing in the checkout changes): a line a hook would
change is a finding, and so is each `path:line` a checking hook prints. Findings are named by the
hook id and count when they sit on a line the series adds (or name no line of a file the series
changes); the rest are upstream's own (shown, not counted).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
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

# pre-commit's file types (its `identify` tags) the kit can tell, by name; "text"/"binary" by
# content (a NUL byte), "symlink" alone for a link (pre-commit passes links only to hooks that ask
# for them).
EXTENSIONS = {
    "py": ("python",),
    "pyi": ("python", "pyi"),
    "yaml": ("yaml",),
    "yml": ("yaml",),
    "json": ("json",),
    "toml": ("toml",),
    "md": ("markdown",),
    "rst": ("rst",),
    "txt": ("plain-text",),
    "sh": ("shell", "sh"),
    "bash": ("shell", "bash"),
    "cfg": ("ini",),
    "ini": ("ini",),
    "c": ("c",),
    "h": ("c", "header"),
    "cpp": ("c++",),
    "cc": ("c++",),
    "hpp": ("c++", "header"),
    "cu": ("cuda",),
    "js": ("javascript",),
    "ts": ("ts",),
    "html": ("html",),
    "css": ("css",),
    "jinja": ("jinja",),
    "j2": ("jinja",),
}
KNOWN_TAGS = {t for tags in EXTENSIONS.values() for t in tags} | {
    "file",
    "text",
    "binary",
    "symlink",
    "executable",
    "non-executable",
    "dockerfile",
}
# Where a checking hook names a line: `path:12:...` (typos, debug-statements) or `in "path", line
# 12` (check-yaml); or only a file: `path - Could not parse ast` (debug-statements on a file that
# does not parse): line 1 stands for it.
LOCATED = (
    re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):"),
    re.compile(r'in "(?P<path>[^"]+)", line (?P<line>\d+)'),
    re.compile(r"^(?P<path>\S.*?) - "),
)
CONFIG = ".pre-commit-config.yaml"
UNCHECKED = (
    "unchecked: "  # a hook the kit cannot run, on a file the series touches that it would see
)
RUNS = ("fixer", "checker", "ruff", "local", "no")
LANGUAGES = (
    "python",
    "system",
    "script",
    "pygrep",
    "fail",
)  # of a tree's local hooks, those the kit runs


class HooksError(KitError):
    """ci/upstream-hooks.toml cannot be read, or a hook cannot be run."""


def file_tags(path: str, data: bytes | None, executable: bool = False) -> set[str]:
    """The identify tags pre-commit would give a file (data None: a symbolic link)."""
    if data is None:
        return {"symlink"}
    name = path.rsplit("/", 1)[-1]
    tags = {
        "file",
        "binary" if b"\0" in data else "text",
        "executable" if executable else "non-executable",
    }
    tags |= set(EXTENSIONS.get(name.rpartition(".")[2].lower(), ()) if "." in name else ())
    if name == "Dockerfile":
        tags.add("dockerfile")
    return tags


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
    types: tuple[str, ...] = ("file",)  # all of them (pre-commit's default: any file)
    types_or: tuple[str, ...] = ()  # at least one of them
    exclude_types: tuple[str, ...] = ()
    files: str = ""
    exclude: str = ""
    language: str = ""  # run = "local": how the tree runs it (one of LANGUAGES)
    pass_filenames: bool = True
    why: str = ""  # run = "no": why it cannot run here
    stand_in: str = (
        ""  # run = "no": what mirrors it (if anything); "" fails the files it sees as unchecked
    )

    @property
    def version(self) -> str:
        return self.package.partition("==")[2] or self.rev or "local"

    def sees(self, path: str, tags: set[str]) -> bool:
        """Whether pre-commit would pass this file to the hook (its files, exclude and types)."""
        if self.files and not re.search(self.files, path):
            return False
        if self.exclude and re.search(self.exclude, path):
            return False
        if self.types_or and not tags & set(self.types_or):
            return False
        return set(self.types) <= tags and not tags & set(self.exclude_types)


@dataclass(frozen=True)
class HookFinding:
    hook: str
    file: str
    line: int
    message: str
    whole_file: bool = (
        False  # the hook named the file, no line of it: the series' when it changes the file
    )


def parse_hooks(text: str, source: str = "ci/upstream-hooks.toml") -> tuple[Hook, ...]:
    try:
        rows = tomllib.loads(text)["hook"]
        hooks = tuple(Hook(**{k: as_field(k, v) for k, v in row.items()}) for row in rows)
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise HooksError(f"{source} is malformed ({exc})", "restore it from git") from None
    for hook in hooks:
        if hook.run not in RUNS or (
            hook.run in ("fixer", "checker") and not (hook.entry and hook.package)
        ):
            raise HooksError(
                f"{source}: hook {hook.id} has run = {hook.run!r} without what it needs",
                f"run is one of {', '.join(RUNS)}; fixer and checker need entry and package",
            )
        unknown = sorted(set(hook.types) - KNOWN_TAGS)
        if unknown:
            raise HooksError(
                f"{source}: hook {hook.id} has unknown types {unknown}",
                f"use pre-commit's type tags the kit knows: {', '.join(sorted(KNOWN_TAGS))}",
            )
    return hooks


def as_field(key: str, value: object) -> object:
    """A table value as Hook holds it: lists as tuples, one `types` name as a tuple of one."""
    if isinstance(value, list):
        return tuple(value)
    return (value,) if key == "types" and isinstance(value, str) else value


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


def located(output: str, files: Iterable[str]) -> list[tuple[str, int, str, bool]]:
    """(file, line, message, names no line) of each output line that names one of files."""
    names = set(files)
    found = []
    for text in output.splitlines():
        for pattern in LOCATED:
            m = pattern.search(text)
            if m and m["path"] in names:
                line = m.groupdict().get("line")
                found.append((m["path"], int(line or 1), text.strip(), line is None))
                break
    return found


def message(output_line: str, path: str, line: int) -> str:
    """A hook's output line without its own `path:line:col:` (or `path - `) and `error:` prefixes."""
    text = re.sub(rf"^{re.escape(path)}(:{line}:(\d+:)?| - )\s*", "", output_line)
    return re.sub(r"^error:\s*", "", text)


def executable(name: str, bin_dir: Path | None) -> str:
    """The hook's program: from bin_dir (the lint session's venv) when given, else from PATH or beside
    the interpreter running the kit (a venv's python run by path has its programs there, not on
    PATH)."""
    path = (
        str(bin_dir)
        if bin_dir
        else os.pathsep.join([os.environ.get("PATH", ""), sysconfig.get_path("scripts")])
    )
    found = shutil.which(name, path=path)
    if found is None:
        where = f"in {bin_dir}" if bin_dir else "on PATH"
        raise HooksError(
            f"{name} (upstream's pre-commit hook) was not found {where}",
            "run nox -s lint (it installs upstream's hook packages), or pass --hooks-bin DIR",
        )
    return found


@dataclass(frozen=True)
class Bins:
    """Where the hooks' programs are: the kit's table's packages (the lint session's venv; None: PATH)
    and the gate env a tree's config needs (its other registry packages, its local python hooks'
    dependencies)."""

    table: Path | None
    table_packages: frozenset[str] = frozenset()
    env: Path | None = None

    def of(self, hook: Hook) -> Path | None:
        if hook.run == "local" or (
            self.env is not None and hook.package not in self.table_packages
        ):
            return self.env
        return self.table


def local_argv(hook: Hook, scratch: Path, env_bin: Path | None) -> list[str]:
    """A tree's local hook as pre-commit runs it: entry (a script by its path in the tree) and args."""
    words = shlex.split(hook.entry)
    if not words:
        raise HooksError(
            f"local hook {hook.id} has an empty entry",
            "give it an entry in .pre-commit-config.yaml",
        )
    if hook.language == "script":
        words[0] = str(scratch / words[0])
    elif not os.path.isabs(words[0]):
        path = os.pathsep.join(
            ([str(env_bin)] if hook.language == "python" and env_bin else [])
            + [os.environ.get("PATH", "")]
        )
        found = shutil.which(words[0], path=path)
        if found is None:
            raise HooksError(
                f"local hook {hook.id}: {words[0]} (its entry) was not found",
                f"install what the tree's {hook.id} needs, or drop the hook from its config",
            )
        words[0] = found
    return [*words, *hook.args]


def grep_hook(hook: Hook, scratch: Path, files: list[str]) -> list[HookFinding]:
    """language pygrep (a regex per line, or per file with --multiline; --negate: files without it) and
    fail."""
    if hook.language == "fail":
        return [
            HookFinding(hook.id, f, 1, hook.entry.strip() or "matched a `fail` hook", True)
            for f in files
        ]
    flags = re.IGNORECASE if "--ignore-case" in hook.args or "-i" in hook.args else 0
    multiline = "--multiline" in hook.args
    pattern = re.compile(hook.entry.encode(), flags | (re.MULTILINE if multiline else 0))
    found = []
    for name in files:
        data = (scratch / name).read_bytes()
        hits = (
            [data.count(b"\n", 0, m.start()) + 1 for m in pattern.finditer(data)]
            if multiline
            else [n for n, line in enumerate(data.splitlines(), 1) if pattern.search(line)]
        )
        if "--negate" in hook.args:
            found += [] if hits else [HookFinding(hook.id, name, 1, f"lacks /{hook.entry}/", True)]
        else:
            found += [
                HookFinding(hook.id, name, n, f"matches /{hook.entry}/") for n in sorted(set(hits))
            ]
    return found


def run_hook(
    hook: Hook, tree: Path, scratch: Path, home: Path, files: list[str], bins: Bins, ci_dir: Path
) -> list[HookFinding]:
    """One hook on files of scratch (a copy of tree, put back afterwards: every hook sees the series'
    files), with home, an empty folder, as its HOME (no user config: childenv.tool_env)."""
    if hook.run == "local" and hook.language in ("pygrep", "fail"):
        return grep_hook(hook, scratch, files)
    environ = childenv.tool_env(home)
    if hook.run == "local":
        argv = local_argv(hook, scratch, bins.of(hook))
        if hook.language == "python" and bins.env is not None:
            environ["PATH"] = os.pathsep.join([str(bins.env), environ.get("PATH", "")])
            environ["VIRTUAL_ENV"] = str(bins.env.parent)
    else:
        args = [
            a.replace("{ci}", str(ci_dir)) for a in hook.args
        ]  # the kit's config files, by absolute path
        argv = [executable(hook.entry, bins.of(hook)), *args, *hook.kit_args]
    argv += files if hook.pass_filenames else []
    try:
        proc = subprocess.run(
            childenv.encoded_argv(argv),
            cwd=scratch,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            env=childenv.encoded_env(environ),
        )
    except OSError as exc:
        raise HooksError(
            f"hook {hook.id} cannot start ({exc.strerror or exc})",
            f"run it by hand: {shlex.join(argv[:3])} ...",
        ) from None
    found = []
    for name in (f for f in files if not (tree / f).is_symlink()):
        before = (tree / name).read_bytes()
        after = (scratch / name).read_bytes()
        if after != before:
            found += [
                HookFinding(hook.id, name, n, f"{hook.id} would change this line")
                for n in changed_lines(
                    before.decode("utf-8", "surrogateescape"),
                    after.decode("utf-8", "surrogateescape"),
                )
            ]
            (scratch / name).write_bytes(before)
    if hook.run == "fixer":
        return found
    hits = located(proc.stdout + proc.stderr, files)
    found += [HookFinding(hook.id, f, n, message(msg, f, n), whole) for f, n, msg, whole in hits]
    if proc.returncode != 0 and not found:
        said = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        if (
            hook.run == "local"
        ):  # a failing gate all the same: on each file it was given, or on the config
            text = f"{hook.id} exited {proc.returncode} naming no line: {said[0]}"
            return [HookFinding(hook.id, f, 1, text, True) for f in files] or [
                HookFinding(hook.id, CONFIG, 1, text)
            ]
        raise HooksError(
            f"{hook.id} ({hook.entry}) exited {proc.returncode} naming no line: {said[0]}",
            f"run it by hand in .work/vllm-omni: {hook.entry} {' '.join(files)}",
        )
    return found


@dataclass(frozen=True)
class GateResult:
    counted: list[HookFinding]  # on lines the series adds
    pre_existing: list[HookFinding]  # on upstream's own lines: shown, not counted
    rows: list[tuple[str, str, str]]  # (hook id, version, what happened)


def judge(
    found: list[HookFinding], added: Mapping[str, set[int]], new_files: set[str]
) -> tuple[list, list]:
    """(counted, pre-existing): a finding counts on an added line, in a file the series adds, or when
    it names no line of a file the series changes (a file that no longer parses is the series'
    doing)."""
    counted = [
        f
        for f in found
        if f.file in new_files
        or f.line in added.get(f.file, set())
        or (f.whole_file and f.file in added)
    ]
    return counted, [f for f in found if f not in counted]


def tree_files(tree: Path, paths: Iterable[str]) -> dict[str, set[str]]:
    """path -> pre-commit's tags, of each of paths present in tree (a link by itself, not what it
    points to)."""
    out = {}
    for p in paths:
        f = tree / p
        if f.is_symlink():
            out[p] = file_tags(p, None)
        elif f.is_file():
            out[p] = file_tags(p, f.read_bytes(), os.access(f, os.X_OK))
    return out


def copy_for_hooks(tree: Path, files: Iterable[str], dest: Path, whole: bool) -> None:
    """dest: the files hooks run on, a copy of tree's (all of it for a tree's own hooks, which read its
    files)."""
    if whole:
        shutil.copytree(
            tree, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"), dirs_exist_ok=True
        )
        return
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if (tree / name).is_symlink():
            os.symlink(os.readlink(tree / name), dest / name)
        else:
            shutil.copyfile(tree / name, dest / name)


def run_gate(
    hooks: Iterable[Hook],
    tree: Path,
    touched: Mapping[str, set[int]],
    new_files: set[str],
    bins: Bins,
    ci_dir: Path,
    whole_tree: bool = False,
) -> GateResult:
    """Every runnable hook on the files of touched (path -> added lines) present in tree; whole_tree:
    they run in a copy of all of tree (a tree's own config: its local hooks and settings). A hook
    that cannot run here and has no stand-in fails as unchecked when the series touches a file it
    sees."""
    hooks = list(hooks)
    present = tree_files(tree, touched)
    counted: list[HookFinding] = []
    pre: list[HookFinding] = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="kit-hook-") as tmp:
        scratch, home = (
            Path(tmp) / "tree",
            Path(tmp) / "home",
        )  # the hooks' empty home beside, not above, the copy
        scratch.mkdir()
        home.mkdir()
        copy_for_hooks(tree, list(present), scratch, whole_tree)
        for hook in hooks:
            files = sorted(p for p, tags in present.items() if hook.sees(p, tags))
            if hook.run == "no":
                if files and not hook.stand_in:
                    counted += [
                        HookFinding(hook.id, f, 1, f"{UNCHECKED}{hook.why}", True) for f in files
                    ]
                note = f"not run: {hook.why}" + (
                    f" (stand-in: {hook.stand_in})" if hook.stand_in else ""
                )
                rows.append((hook.id, hook.version, note))
                continue
            if hook.run == "ruff":
                rows.append(
                    (hook.id, hook.version, f"the ruff step below, on {len(files)} file(s)")
                )
                continue
            ran = files or (hook.run == "local" and not hook.pass_filenames and bool(present))
            found = run_hook(hook, tree, scratch, home, files, bins, ci_dir) if ran else []
            mine, theirs = judge(found, touched, new_files)
            counted += mine
            pre += theirs
            rows.append((hook.id, hook.version, f"{len(mine)} finding(s) on {len(files)} file(s)"))
    return GateResult(counted, pre, rows)
