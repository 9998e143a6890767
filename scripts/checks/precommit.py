"""Upstream's gates, run by pre-commit itself on a scratch copy of the target tree.

Whose config: a git tree's own `.pre-commit-config.yaml`, or, for the release wheel (which ships
none), ci/upstream-pre-commit-config.yaml. pre-commit decides everything a config says (which files
each hook sees, stages, languages, args, always_run, fixers); the kit only

- rewrites each remote hook repository into `repo: local` hooks whose `additional_dependencies` are
  the repository's registry package at the config's rev (ci/hook-packages.toml maps them: a clone of
  GitHub is not reachable from every machine, the registry is). A repository or hook it cannot map
  becomes a `language: fail` hook of the same id and filters: pre-commit lists the files it would
  have checked, and each is an "unchecked" finding;
- reads pre-commit's verdicts and findings (`path:line` in a hook's output, the lines a fixing hook
  changed) and tells the series' lines from upstream's.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from scripts import childenv, gitcmd, pipindex, procgroup
from scripts.errors import KitError
from scripts.report import progress

CONFIG = ".pre-commit-config.yaml"
RELEASE_CONFIG = "upstream-pre-commit-config.yaml"  # in ci/
PACKAGES = "hook-packages.toml"  # in ci/
RELEASE = f"ci/{RELEASE_CONFIG}, the kit's copy of upstream's gates (the release ships no config)"
# The kit's files the release config names by path (upstream reads them from its pyproject.toml).
RELEASE_FILES = ("ruff-upstream.toml", "typos-upstream.toml")
UNCHECKED = "unchecked: "
# pre-commit's line per hook (`name....Passed`, `name...(no files to check)Skipped`).
STATUS = re.compile(
    r"^(?P<name>.*?)\.{3,}(?:\((?P<why>[^)]*)\))?(?P<status>Passed|Failed|Skipped)$"
)


class GateError(KitError):
    """A tree's gates cannot run: its config is malformed, or pre-commit cannot start."""


@dataclass(frozen=True)
class RegistryRepo:
    """A remote hook repository as its registry package: the hooks of its manifest
    (`.pre-commit-hooks.yaml`, at the revs the kit was written for) and how a rev names a version."""

    url: str
    package: str
    hooks: Mapping[str, Mapping[str, object]]
    tag_prefix: str = "v"
    revs: Mapping[str, str] = field(default_factory=dict)  # other revs -> the package's version

    def version(self, rev: str) -> str | None:
        if rev in self.revs:
            return self.revs[rev]
        number = rev.removeprefix(self.tag_prefix)
        return number if re.fullmatch(r"\d+(\.\d+)*", number) else None


@dataclass(frozen=True)
class StandIn:
    """An upstream hook the release config leaves out (its tool is not in the wheel), and what the
    kit runs in its place."""

    id: str
    why: str
    stand_in: str


@dataclass(frozen=True)
class HookTable:
    """ci/hook-packages.toml, read once."""

    repos: Mapping[str, RegistryRepo]
    stand_ins: tuple[StandIn, ...] = ()

    def find(self, url: str) -> RegistryRepo | None:
        return self.repos.get(short_url(url))


def short_url(url: str) -> str:
    return url.strip().removesuffix("/").removesuffix(".git")


def load_table(path: Path) -> HookTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        repos = {
            short_url(row["url"]): RegistryRepo(
                row["url"],
                row["package"],
                row["hooks"],
                row.get("tag_prefix", "v"),
                row.get("revs", {}),
            )
            for row in data["repository"]
        }
        stand_ins = tuple(StandIn(**row) for row in data.get("stand-in", []))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise GateError(f"ci/{PACKAGES} is malformed ({exc})", "restore it from git") from None
    return HookTable(repos, stand_ins)


@dataclass(frozen=True)
class GateSource:
    """Whose gates judge the series: a tree's own config (read from the tree, where pre-commit reads
    it) or the kit's release config."""

    label: str
    release_config: Path | None = None  # None: the tree's own .pre-commit-config.yaml
    where: str = ""  # the tree as the user named it (URL and ref), for fixes

    @property
    def is_tree(self) -> bool:
        return self.release_config is None


def release_gates(ci_dir: Path) -> GateSource:
    return GateSource(RELEASE, ci_dir / RELEASE_CONFIG, "the release")


def tree_gates(where: str, commit: str) -> GateSource:
    return GateSource(f"{CONFIG} of {where} at {commit[:12]}", None, f"{where} at {commit[:12]}")


# ---- the config pre-commit runs -------------------------------------------------------------


def unchecked_hook(hook: Mapping[str, object], why: str) -> dict[str, object]:
    """hook as a `language: fail` hook: same id and file filters, pre-commit lists what it sees."""
    kept = {
        k: v
        for k, v in hook.items()
        if k not in ("entry", "language", "args", "additional_dependencies", "language_version")
    }
    return {
        **kept,
        "name": hook.get("name", hook["id"]),
        "entry": f"{UNCHECKED}{why}",
        "language": "fail",
    }


def registry_hooks(repo: Mapping[str, object], table: HookTable) -> list[dict[str, object]]:
    """A remote repository's hooks as local hooks from the registry, or unchecked."""
    url, rev = str(repo.get("repo", "")), str(repo.get("rev", ""))
    known = table.find(url)
    version = known.version(rev) if known else None
    out = []
    for hook in (h for h in repo.get("hooks") or [] if isinstance(h, dict)):
        if known is None:
            why = f"{url} at {rev}: no registry package the kit maps this repository to"
        elif version is None:
            why = f"rev {rev} of {url} is no release of {known.package} on the registry"
        elif hook.get("id") not in known.hooks:
            why = f"{url} at {rev}: hook {hook.get('id')} is not in the kit's table of {known.package}"
        else:
            deps = [f"{known.package}=={version}", *(hook.get("additional_dependencies") or [])]
            # what the config sets wins over the manifest, as pre-commit merges them
            manifest = known.hooks[str(hook["id"])]
            local = {**manifest, **hook, "language": "python", "additional_dependencies": deps}
            out.append({"id": hook["id"], **local})
            continue
        out.append(unchecked_hook(hook, f"{why} (ci/{PACKAGES})"))
    return out


def run_config(data: object, table: HookTable) -> object:
    """The config pre-commit runs: data with every remote repository rewritten; data that is no
    config is given back as it is (pre-commit's validation names what is wrong)."""
    if not isinstance(data, dict) or not isinstance(data.get("repos"), list):
        return data
    repos = []
    for repo in data["repos"]:
        if (
            isinstance(repo, dict)
            and repo.get("repo") not in ("local", "meta")
            and isinstance(repo.get("hooks"), list)
        ):
            repo = {"repo": "local", "hooks": registry_hooks(repo, table)}
        repos.append(repo)
    return {**data, "repos": repos}


# ---- running pre-commit ---------------------------------------------------------------------


@dataclass(frozen=True)
class PreCommit:
    """The pinned pre-commit (in the interpreter that runs the kit) and its store under .work."""

    argv: tuple[str, ...]
    version: str
    home: Path  # PRE_COMMIT_HOME: its hook envs, made once and reused
    # where the scratch copies go (.work): not the user's TMPDIR, whose tool configs a hook that
    # looks in the folders above its tree would read
    scratch: Path
    # the user's package index, for the installs pre-commit makes (read once: scripts/pipindex.py)
    index: Mapping[str, str] = field(default_factory=dict)

    def env(self, tool_home: Path) -> dict[str, str]:
        """The child environment (scripts/childenv.py) plus the user's package index for the
        installs pre-commit makes, its store, and git without the user's config."""
        return {
            **childenv.tool_env(tool_home),
            **self.index,
            "PRE_COMMIT_HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            # one `path:line:col: CODE message` line per finding (what the kit reads)
            "RUFF_OUTPUT_FORMAT": "concise",
        }


def find_pre_commit(work: Path) -> PreCommit:
    try:
        version = importlib.metadata.version("pre-commit")
    except importlib.metadata.PackageNotFoundError:
        raise GateError(
            f"pre-commit is not installed in {sys.executable}, and it runs upstream's gates",
            "run nox -s lint (it installs the pinned pre-commit), or pip install -r "
            "ci/kit-dev-tools.txt",
        ) from None
    # a store per pre-commit and python: their hook envs are made once and reused warm; a user's
    # PRE_COMMIT_HOME (pre-commit's own variable) shares one store between clones
    key = f"pre-commit-{version}-py{sys.version_info.major}.{sys.version_info.minor}"
    home = os.environ.get("PRE_COMMIT_HOME") or str(work / "pre-commit" / key)
    index = pipindex.installer_env(os.environ)
    return PreCommit((sys.executable, "-m", "pre_commit"), version, Path(home), work, index)


def run_pre_commit(
    pc: PreCommit, args: list[str], cwd: Path, tool_home: Path
) -> subprocess.CompletedProcess[str]:
    """pre-commit in a process group of its own (ended with its hooks on every way out)."""
    try:
        done = procgroup.run(
            childenv.encoded_argv([*pc.argv, *args]),
            cwd=cwd,
            env=childenv.encoded_env(pc.env(tool_home)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except OSError as exc:
        raise GateError(
            f"pre-commit cannot start ({exc.strerror or exc})",
            "run nox -s lint (it installs the pinned pre-commit)",
        ) from None
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode("utf-8", "replace"), ""
    )


def one_line(validation: str) -> str:
    """pre-commit's validation message (`==> At Hook(id='x')`, `=====> '([' is not ...`) in one
    line."""
    parts = []
    for line in validation.splitlines():
        text = line.strip()
        if text.startswith("=====>"):
            parts.append(text.lstrip("=> ").strip())
        elif text.startswith("==> At ") and "Config()" not in text:
            parts.append(text.removeprefix("==> At "))
        elif text and not text.startswith("==> File") and parts and not text.startswith("==>"):
            parts.append(text)
    return " > ".join(parts) or (validation.strip().splitlines() or ["no message"])[-1]


def config_error(source: GateSource, said: str, by: str = "validate-config") -> GateError:
    """One line quoting what pre-commit said of the config (`pre-commit <by>` says the same)."""
    where = f"{CONFIG} of {source.where}" if source.is_tree else f"ci/{RELEASE_CONFIG}"
    fix = (
        f"fix the tree's {CONFIG} (plain `pre-commit {by}` says the same)"
        if source.is_tree
        else "restore it from git"
    )
    return GateError(f"{where} is not a config pre-commit runs: {said}", fix)


# ---- the scratch copy -------------------------------------------------------------------------


def scratch_copy(tree: Path, dest: Path, only: list[str] | None) -> None:
    """dest: a git repository pre-commit runs in, every file committed (so that pre-commit, and
    reset_hard after a fixing hook, see what a hook changes): a clone of tree's HEAD (a tree's own
    hooks read its other files), or only the files named (the release config's hooks read nothing
    else), links as links."""
    if only is None:
        # a local clone: objects linked (never written), files written by git itself
        gitcmd.clone(tree, dest)
        return
    dest.mkdir(parents=True)
    for name in only:
        src, out = tree / name, dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)
    gitcmd.init(dest)
    # a series that only deletes files leaves nothing to commit (and no hook anything to change)
    if only:
        gitcmd.commit_everything(dest, "the files lint judges", "2000-01-01T00:00:00+00:00")


# ---- reading pre-commit's output --------------------------------------------------------------


@dataclass
class HookRun:
    """One hook as pre-commit reported it."""

    id: str
    name: str
    status: str  # Passed, Failed, Skipped
    why: str = ""  # of a skip ("no files to check")
    modified: bool = False
    exit_code: int = 0
    output: list[str] = field(default_factory=list)


def hook_runs(output: str) -> list[HookRun]:
    """pre-commit run --verbose's report, hook by hook."""
    runs: list[HookRun] = []
    for line in output.splitlines():
        m = STATUS.match(line)
        if m:
            runs.append(HookRun("", m["name"].strip(), m["status"], m["why"] or ""))
            continue
        if not runs:
            continue
        run = runs[-1]
        if line.startswith("- hook id: ") and not run.id:
            run.id = line.removeprefix("- hook id: ").strip()
        elif line.startswith("- exit code: ") and not run.output:
            run.exit_code = int(line.removeprefix("- exit code: ").strip() or 0)
        elif line == "- files were modified by this hook" and not run.output:
            run.modified = True
        elif line.startswith("- duration: ") and not run.output:
            pass
        else:
            run.output.append(line)
    return runs


@dataclass(frozen=True)
class HookFinding:
    hook: str
    file: str
    line: int
    message: str
    whole_file: bool = False  # names no line of the file


def located(run: HookRun, files: Iterable[str]) -> list[HookFinding]:
    """Each `path:line` (or `"path", line N`) of a touched file in a hook's output; a line that is a
    touched path alone (a `fail` hook's list) is a finding on the whole file."""
    names = sorted(set(files), key=len, reverse=True)
    if not names:
        return []
    alternatives = "|".join(re.escape(n) for n in names)
    at = re.compile(rf"(?<![\w/.-])(?:\./)?(?P<path>{alternatives}):(?P<line>\d+)")
    quoted = re.compile(rf'"(?:\./)?(?P<path>{alternatives})", line (?P<line>\d+)')
    dashed = re.compile(rf"^(?:\./)?(?P<path>{alternatives}) - (?P<rest>.*)$")
    text = [line.rstrip() for line in run.output]
    first = next((t.strip() for t in text if t.strip() and t.strip() not in names), run.name)
    found, said = [], ""
    for line in text:
        stripped = line.strip()
        if stripped in names:
            found.append(HookFinding(run.id, stripped, 1, first, True))
            continue
        m = at.search(line) or quoted.search(line)
        if m:
            rest = line[m.end() :].lstrip(":0123456789 ").strip()
            # a pointer line (`--> path:3:7`, `in "path", line 2`) says what its line above said
            message = rest if rest and m.start() < 3 and at.search(line) else said or stripped
            found.append(HookFinding(run.id, m["path"], int(m["line"]), message))
            continue
        m = dashed.match(stripped)
        if m:
            found.append(HookFinding(run.id, m["path"], 1, m["rest"], True))
            continue
        if stripped:
            said = stripped
    return found


def line_changes(before: bytes, after: bytes) -> tuple[list[int], dict[int, int]]:
    """(lines of before a fixing hook changed, each line of after -> its line in before); a pure
    insertion counts as the line it follows."""
    old = before.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    new = after.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    changed: list[int] = []
    where: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            changed += list(range(i1 + 1, i2 + 1)) if i2 > i1 else [max(i1, 1)]
        for j in range(j1, j2):
            where[j + 1] = i1 + 1 + (j - j1 if tag == "equal" else 0)
    return sorted(set(changed)), where


# ---- the gate ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateResult:
    counted: list[HookFinding]  # on lines the series adds (or the whole of a file it touches)
    pre_existing: list[HookFinding]  # on upstream's own lines: shown, not counted
    rows: list[tuple[str, str, str]]  # (hook id, version, what happened)
    ruff: str  # the ruff the config runs ("" when none)


def hook_versions(config: object) -> dict[str, str]:
    """hook id -> the version it runs at (a registry package's, a remote rev, or "local")."""
    out: dict[str, str] = {}
    for repo in (config.get("repos") or []) if isinstance(config, dict) else []:
        for hook in (repo.get("hooks") or []) if isinstance(repo, dict) else []:
            if not isinstance(hook, dict) or "id" not in hook:
                continue
            deps = hook.get("additional_dependencies") or []
            pinned = deps[0].partition("==")[2] if deps and repo.get("repo") == "local" else ""
            if str(hook.get("entry", "")).startswith(UNCHECKED):
                pinned = "-"
            out.setdefault(str(hook["id"]), pinned or str(repo.get("rev") or repo.get("repo")))
    return out


def missing_script(tree: Path, hook: Mapping[str, object]) -> str | None:
    """The file a tree's local hook runs (its entry's program or python script) when the tree lacks
    it."""
    try:
        words = shlex.split(str(hook.get("entry", "")))
    except ValueError:
        return None
    if hook.get("language") == "python" and words[:1] == ["python"]:
        words = words[1:]
    elif hook.get("language") not in ("script", "python", "system"):
        return None
    name = words[0] if words else ""
    looks_like_path = "/" in name or name.endswith((".py", ".sh"))
    if not looks_like_path or os.path.isabs(name) or os.path.lexists(tree / name):
        return None
    return name


def run_gates(
    pc: PreCommit,
    source: GateSource,
    table: HookTable,
    tree: Path,
    touched: Mapping[str, set[int]],
    new_files: set[str],
) -> GateResult:
    """pre-commit run --files <the touched files present in tree> on a scratch copy of tree, under
    source's config; findings sorted into the series' and upstream's."""
    import yaml  # pre-commit's own dependency: present wherever pre-commit is

    files = sorted(p for p in touched if os.path.lexists(tree / p))
    pc.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=pc.scratch, prefix=".gates-") as tmp:
        scratch, home, config = Path(tmp) / "tree", Path(tmp) / "home", Path(tmp) / "config.yaml"
        home.mkdir()
        scratch_copy(tree, scratch, None if source.is_tree else files)
        given = scratch / CONFIG if source.is_tree else source.release_config
        assert given is not None
        if not source.is_tree:
            # the release config's ruff and typos settings, by path from the tree's root
            (scratch / "ci").mkdir(exist_ok=True)
            for name in RELEASE_FILES:
                shutil.copyfile(given.parent / name, scratch / "ci" / name)
        if not os.path.lexists(given):
            return GateResult([], [], [("(none)", "", f"the tree has no {CONFIG}: no hooks")], "")
        try:
            data = yaml.safe_load(given.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("repos"), list):
            said = run_pre_commit(pc, ["validate-config", str(given)], scratch, home).stdout
            raise config_error(source, one_line(said))
        rewritten = run_config(data, table)
        config.write_text(yaml.safe_dump(rewritten, sort_keys=False), encoding="utf-8")
        args = ["run", "--verbose", "--color", "never", "-c", str(config), "--files", *files]
        done = run_pre_commit(pc, args, scratch, home)
        failed_to_load = (
            "InvalidConfigError" in done.stdout or "InvalidManifestError" in done.stdout
        )
        if done.returncode not in (0, 1) or failed_to_load:
            if failed_to_load:
                said = run_pre_commit(pc, ["validate-config", str(given)], scratch, home).stdout
                raise config_error(source, one_line(said))
            said = next(
                (ln.strip() for ln in done.stdout.splitlines() if "error has occurred" in ln),
                gitcmd.last_line(done.stdout),
            )
            said = said.split("...", 1)[-1].lstrip(".")
            if "[INFO] Installing environment for " in done.stdout:
                raise GateError(
                    f"pre-commit could not make a hook env: {said}",
                    "check your package index (pip's settings reach pre-commit) and the hooks' "
                    f"additional_dependencies; pre-commit's log: {pc.home}/pre-commit.log",
                )
            raise config_error(source, said, "run")
        for line in done.stdout.splitlines():
            if line.startswith("[INFO] Installing environment for "):
                made = line.removeprefix("[INFO] Installing environment for ").rstrip(".")
                progress(
                    f"pre-commit made the hook env of {made} in {pc.home} (reused from now on)"
                )
        runs = hook_runs(done.stdout)
        found = findings_of(pc, runs, args, scratch, home, files, rewritten, tree, source)
    versions = hook_versions(rewritten)
    counted = [
        f
        for f in found
        if f.file in new_files
        or f.line in touched.get(f.file, set())
        or (f.whole_file and f.file in touched)
        or f.file == CONFIG
        or f.message.startswith(UNCHECKED)
    ]
    rows = [(r.id, versions.get(r.id, ""), what_happened(r, found)) for r in runs]
    ran = {r.id for r in runs}
    rows += [
        (hook_id, version, "not run by `pre-commit run` (another stage)")
        for hook_id, version in versions.items()
        if hook_id not in ran
    ]
    if not source.is_tree:
        rows += [
            (s.id, "local", f"not run: {s.why} (stand-in: {s.stand_in})") for s in table.stand_ins
        ]
    ruff = next((v for k, v in versions.items() if k in ("ruff-check", "ruff")), "")
    return GateResult(counted, [f for f in found if f not in counted], rows, ruff)


def what_happened(run: HookRun, found: list[HookFinding]) -> str:
    if run.status == "Skipped":
        return f"skipped ({run.why or 'no files'})"
    mine = [f for f in found if f.hook == run.id]
    if run.status == "Passed":
        return "passed"
    return f"failed: {len(mine)} finding(s)" + (", files modified" if run.modified else "")


def findings_of(
    pc: PreCommit,
    runs: list[HookRun],
    args: list[str],
    scratch: Path,
    home: Path,
    files: list[str],
    config: object,
    tree: Path,
    source: GateSource,
) -> list[HookFinding]:
    """Each failed hook's findings: what it names in its output, the lines it changed (it runs again
    alone on a fresh copy, so each fixer's lines are its own), or the hook itself on the config."""
    hooks = {
        str(h["id"]): h
        for repo in config.get("repos", [])
        if isinstance(config, dict) and isinstance(repo, dict)
        for h in repo.get("hooks") or []
        if isinstance(h, dict) and "id" in h
    }
    found: list[HookFinding] = []
    # a hook after one that changed files saw the changed files: its lines are read again alone
    dirty = False
    for run in runs:
        if run.status != "Failed":
            continue
        if not (run.modified or dirty):
            mine = located(run, files)
        else:
            mine = alone(pc, run, args, scratch, home, files, tree)
        dirty = dirty or run.modified
        if not mine:
            mine = [no_line(run, hooks.get(run.id, {}), tree, source)]
        found += list(dict.fromkeys(mine))
    return found


def alone(
    pc: PreCommit,
    run: HookRun,
    args: list[str],
    scratch: Path,
    home: Path,
    files: list[str],
    tree: Path,
) -> list[HookFinding]:
    """run's hook again, alone, on the tree's files: the lines it changes, and the lines it names
    (a fixer names lines of the file it fixed: each is taken back to the tree's line)."""
    gitcmd.reset_hard(scratch)
    done = run_pre_commit(pc, ["run", run.id, *args[1:]], scratch, home)
    again = next((r for r in hook_runs(done.stdout) if r.id == run.id), run)
    mine: list[HookFinding] = []
    back: dict[str, dict[int, int]] = {}
    for name in files:
        if (tree / name).is_symlink() or not (tree / name).is_file():
            continue
        before, after = (tree / name).read_bytes(), (scratch / name).read_bytes()
        if before != after:
            changed, back[name] = line_changes(before, after)
            mine += [
                HookFinding(run.id, name, n, f"{run.id} would change this line") for n in changed
            ]
    for f in located(again, files):
        line = back.get(f.file, {}).get(f.line, f.line)
        mine.append(HookFinding(f.hook, f.file, line, f.message, f.whole_file))
    gitcmd.reset_hard(scratch)
    return mine


def no_line(
    run: HookRun, hook: Mapping[str, object], tree: Path, source: GateSource
) -> HookFinding:
    """A hook that failed naming no line of a touched file: the hook itself, on the config; a tree's
    hook whose program the tree lacks says so."""
    script = missing_script(tree, hook) if source.is_tree else None
    if script:
        message = (
            f"runs {script}, which {source.where} lacks (its {CONFIG} names it in hook {run.id}'s "
            "entry)"
        )
    else:
        said = next((t.strip() for t in reversed(run.output) if t.strip()), "no output")
        message = f"failed (exit {run.exit_code}) naming no line: {said}"
    return HookFinding(run.id, CONFIG, 1, message)


def fix_of(f: HookFinding, source: GateSource) -> str:
    """What the user can do about a finding, in their own tree (the scratch copy is gone)."""
    if f.message.startswith(UNCHECKED):
        return (
            f"the kit cannot run it: run `pre-commit run {f.hook} --files {f.file}` where the hook's "
            "repository can be reached, or leave the file"
        )
    if f.file == CONFIG and " lacks " in f.message:
        script = f.message.split(" ", 2)[1].rstrip(",")
        return f"add {script} to {source.where}, or drop hook {f.hook} from its {CONFIG}"
    if f.file == CONFIG:
        where = source.where if source.is_tree else "a checkout of the patched tree"
        return f"run `pre-commit run {f.hook} --files ...` in {where} to see its whole output"
    return f"make the line pass upstream's {f.hook} hook"


def plan_rows(config_text: str | None, table: HookTable, is_tree: bool) -> list[list[str]]:
    """(hook id, version, how the kit runs it) for each hook of a config (a report of rebase)."""
    import yaml

    try:
        data = yaml.safe_load(config_text or "")
    except yaml.YAMLError:
        data = None
    rewritten = run_config(data, table)
    if not isinstance(rewritten, dict):
        return []
    versions = hook_versions(rewritten)
    rows = []
    for repo in rewritten.get("repos", []):
        for hook in repo.get("hooks") or [] if isinstance(repo, dict) else []:
            if not isinstance(hook, dict) or "id" not in hook:
                continue
            entry = str(hook.get("entry", ""))
            deps = hook.get("additional_dependencies") or []
            how = (
                entry
                if entry.startswith(UNCHECKED)
                else f"registry package {deps[0]}"
                if deps
                and str(deps[0]).partition("==")[0] in {r.package for r in table.repos.values()}
                else f"from the tree ({hook.get('language')}): {entry}"
            )
            rows.append([str(hook["id"]), versions.get(str(hook["id"]), ""), f"pre-commit: {how}"])
    if not is_tree:
        rows += [
            [s.id, "local", f"not run: {s.why} (stand-in: {s.stand_in})"] for s in table.stand_ins
        ]
    return rows
