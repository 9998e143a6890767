"""`nox -s rebase -- VERSION | --git URL REF`: try the series on another upstream.

The target is a release wheel from the package registry (VERSION), or a git
ref (branch, tag or sha) at a URL, a `file://` URL or a local path, verified by
the commit id it resolves to. Its tree is built in a scratch folder (the
checkout is not touched), with the current series' objects fetched beside it
so that 3-way merges have their base. Each patch, in order, gets a verdict
(scripts/rebase/verdicts.py: the evidence, strongest first).
A table, a JSON and a Markdown report in .work/rebase/. With --move, when nothing
conflicts, the pin moves to the target, the patches found upstream are dropped
(the series comment says where upstream has them) and the rest is refreshed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scripts import diffparse, gitcmd, handfile, registry, worklock
from scripts.checkout import BRANCH, PRISTINE_TAG
from scripts.checkout.apply import commit_all
from scripts.checkout.foreign import KIT_MARK
from scripts.checkout.guards import Inspection, guard
from scripts.checkout.pristine import build_pristine
from scripts.checkout.refresh import RefreshInterrupted, refresh, swap_into
from scripts.checkout.state import State, pin_digest, read_state, write_state
from scripts.checks import precommit
from scripts.errors import KitError
from scripts.gitcmd import GitFailed, head
from scripts.pin import COMMIT, Pin, fetch_verified, parse_pin, set_key, verify_digest
from scripts.rebase.verdicts import DROPPED, OUTCOMES, Verdict, judge_series
from scripts.report import markdown_table, progress
from scripts.series import Patch, load_series, series_header
from scripts.workspace import Workspace

# a release version; anything else is a git ref
VERSION = re.compile(r"^\d+(\.\d+)+([.+-]?[A-Za-z0-9.]+)?$")


class RebaseError(KitError):
    """The series cannot be tried or moved as asked."""


SCRATCH_PREFIX = ".rebase-"  # .work/.rebase-XXXXXXXX: one run's trees (current, target, patches)
SCRATCH_PARTS = {"current", "target", "patches"}


def is_scratch(path: Path) -> bool:
    """A scratch folder a rebase made before its folders were locked: only its own parts, the first
    it builds (the current series' repository) marked as the kit's."""
    entries = {e.name: e for e in path.iterdir()}
    return (
        set(entries) <= SCRATCH_PARTS
        and "current" in entries
        and all(e.is_dir() and not e.is_symlink() for e in entries.values())
        and (entries["current"] / ".git" / KIT_MARK).is_file()
    )


def sweep(ws: Workspace) -> None:
    """The scratch of a rebase killed outright (kill -9) removed; a live run's is never touched."""
    if ws.work.is_dir():
        worklock.sweep_scratch(ws.work, SCRATCH_PREFIX, is_scratch, progress)


@dataclass(frozen=True)
class Target:
    """Where the series is tried: a registry release or a git ref, and what identifies its content."""

    pin: Pin  # the pin it would be
    kind: str  # release | git
    url: str = ""
    ref: str = ""
    commit: str = ""

    @property
    def label(self) -> str:
        if self.kind == "git":
            return f"{self.url} {self.ref} ({self.commit[:12]})"
        return self.pin.label


# ---- the target ------------------------------------------------------------------


def resolve_ref(url: str, ref: str, cwd: Path) -> str:
    """The commit REF names at URL: a sha as given, else the branch or tag (peeled) the server
    advertises."""
    if COMMIT.match(ref):
        return ref
    try:
        commit = gitcmd.remote_commit(url, ref, branches=True, cwd=cwd)
    except GitFailed as exc:
        raise RebaseError(
            f"cannot list refs of {url} ({exc.what})", "check the URL and the network"
        ) from exc
    if commit:
        return commit
    raise RebaseError(
        f"{url} has no branch or tag {ref}", "name a branch, a tag or a full 40-hex commit id"
    )


def git_url(url: str) -> str:
    """A local path as an absolute path (git takes those as they are); URLs unchanged."""
    return url if "://" in url or url.startswith("git@") else str(Path(url).resolve())


def target_of(ws: Workspace, pin: Pin, args: argparse.Namespace) -> Target:
    release = args.target
    if release and args.git:
        raise RebaseError(
            f"both a target ({release}) and --git {' '.join(args.git)} given: only one can be "
            "tried",
            f"drop one: nox -s rebase -- {release}, or nox -s rebase -- --git {' '.join(args.git)}",
        )
    if release == "latest":
        release = registry.newest_release(pin.project)
        progress(f"latest release of {pin.project} on the package index: {release}")
    if args.git:
        url, ref = git_url(args.git[0]), args.git[1]
    elif release and VERSION.match(release):
        wheel, digest = fetch_verified(
            pin.project,
            release,
            ws.downloads,
            None,
            lambda name: registry.published_sha256(pin.project, name),
        )
        moved = replace(
            pin,
            version=release,
            source="wheel",
            wheel_filename=wheel.name,
            wheel_sha256=digest,
            git_tag=f"v{release}",
            git_commit="",
        )
        return Target(moved, "release")
    elif release:
        url, ref = pin.git_url, release
    else:
        raise RebaseError(
            "no target given",
            "name a release (nox -s rebase -- 0.28.0) or a git ref (-- --git URL REF)",
        )
    commit = resolve_ref(url, ref, ws.root)
    return Target(
        replace(pin, source="git", git_url=url, git_tag=ref, git_commit=commit),
        "git",
        url,
        ref,
        commit,
    )


def fetch_target(target: Target, dest: Path, downloads: Path) -> None:
    """A repository at dest holding the target tree on branch `series`, tagged pristine, with git
    history."""
    if target.kind != "git":
        build_pristine(target.pin, dest, downloads, progress)
        return
    progress(f"fetching {target.url} {target.ref} (history included, for patch-ids)")
    try:
        # a shallow source (a CI checkout, a depth-1 clone) sends what it has: without
        # --update-shallow git would drop the commit with exit 0, and no FETCH_HEAD
        gitcmd.fetch_commit(dest, target.url, target.commit, "--no-tags", "--update-shallow")
    except GitFailed as exc:
        what = f"cannot fetch {target.ref} ({target.commit[:12]}) from {target.url} ({exc.what})"
        raise RebaseError(what, "check the URL, the ref and the network") from exc
    gitcmd.start_branch(dest, BRANCH, target.commit)
    gitcmd.tag(dest, PRISTINE_TAG, target.commit)


def current_series(pin: Pin, patches: list[Patch], dest: Path, downloads: Path) -> list[str]:
    """The current pin with the series applied (it applies there by definition); the patch commits, in
    order."""
    build_pristine(pin, dest, downloads, progress)
    return commit_all(
        dest,
        patches,
        False,
        lambda patch, result: RebaseError(
            f"{patch.name} does not apply to the current pin ({result.detail})",
            "run nox -s apply and resolve it first",
        ),
    )


def try_series(
    pin: Pin, target: Target, patches: list[Patch], scratch: Path, downloads: Path
) -> tuple[Path, list[Verdict]]:
    """The target in scratch with every patch judged and, where it applies, applied in order."""
    commits = current_series(pin, patches, scratch / "current", downloads)
    repo = scratch / "target"
    fetch_target(target, repo, downloads)
    return repo, judge_series(
        repo, scratch / "current", patches, commits, with_history=target.kind == "git"
    )


def gates_of(target: Target, repo: Path, ci_dir: Path) -> dict[str, object]:
    """Which gates the target judges the series by, and how pre-commit runs each (lint runs them
    after --move): a git target's own config, read as data, or the kit's release config."""
    table = precommit.load_table(ci_dir / precommit.PACKAGES)
    if target.kind == "git":
        source = precommit.tree_gates(f"{target.url} {target.ref}", target.commit)
        text = gitcmd.show_file(repo, target.commit, precommit.CONFIG)
    else:
        source = precommit.release_gates(ci_dir)
        text = (ci_dir / precommit.RELEASE_CONFIG).read_text(encoding="utf-8")
    rows = precommit.plan_rows(text, table, source.is_tree)
    return {"source": source.label, "hooks": rows}


# ---- reports -----------------------------------------------------------------------


def dependent_tests(dropped: list[Patch], test_files: dict[str, str]) -> dict[str, list[str]]:
    """{dropped patch: test files naming a file it touched (by path, module or file name), directly or
    through a helper module of the suite they import}."""
    out = {}
    for patch in dropped:
        needles = set()
        for path in {h.path for h in diffparse.hunks(patch.text)}:
            needles |= {path, Path(path).name}
            if path.endswith(".py"):
                needles.add(path[: -len(".py")].replace("/", "."))
        hits = {name for name, text in test_files.items() if any(n in text for n in needles)}
        while True:  # a test importing a helper that names the file depends on it too
            stems = {Path(h.split(" ")[0]).stem for h in hits}
            more = {
                name
                for name, text in test_files.items()
                if any(re.search(rf"^\s*(import|from) {re.escape(s)}\b", text, re.M) for s in stems)
            } - hits
            if not more:
                break
            hits |= more
        if hits:
            out[patch.name] = sorted(hits)
    return out


def report(
    pin: Pin,
    target: Target,
    verdicts: list[Verdict],
    moved: bool,
    depends: dict[str, list[str]],
    gates: dict[str, object],
) -> dict[str, object]:
    return {
        "from": pin.label,
        "to": target.label,
        "target": {
            "kind": target.kind,
            "version": target.pin.version,
            "source": target.pin.source,
            "wheel": target.pin.wheel_filename if target.kind == "release" else "",
            "wheel_sha256": target.pin.wheel_sha256 if target.kind == "release" else "",
            "git_url": target.url,
            "git_ref": target.ref,
            "git_commit": target.commit,
        },
        "patches": [asdict(v) for v in verdicts],
        "counts": {o: sum(v.outcome == o for v in verdicts) for o in OUTCOMES},
        "applies": all(v.outcome != "conflict" for v in verdicts),
        "dependent_tests": depends,
        "gates": gates,
        "moved": moved,
    }


def markdown(data: dict[str, object], verdicts: list[Verdict]) -> str:
    """The report as a maintainer pastes it into the PR that moves the pin."""
    rows = markdown_table(
        ["#", "patch", "verdict", "evidence"],
        [(i, f"`{v.name}`", v.shown, v.detail) for i, v in enumerate(verdicts, 1)],
    )
    hunks = "\n".join(
        f"- `{v.name}` {label}: {mark}"
        for v in verdicts
        if v.outcome == "upstream-partial"
        for label, mark in v.hunks
    )
    depends = data["dependent_tests"]
    assert isinstance(depends, dict)
    deps = "\n".join(
        f"- `{name}`: {', '.join(f'`{t}`' for t in tests)}" for name, tests in depends.items()
    )
    gates = data["gates"]
    assert isinstance(gates, dict)
    gate_rows = markdown_table(
        ["hook", "version", "how the kit runs it"], [tuple(row) for row in gates["hooks"]]
    )
    return f"""## Rebase of the series: {data["from"]} -> {data["to"]}

{rows}

Gates of the target ({gates["source"]}); `nox -s lint` runs them once the pin has moved:

{gate_rows}

{f"Per hunk:{chr(10)}{hunks}{chr(10)}" if hunks else ""}
Tests that exercise a dropped patch's files (they now test upstream's version):
{deps or "- none"}

{pin_line(data) if data["moved"] else "Nothing was changed (no --move)."}
Made by `nox -s rebase`.
"""


def pin_line(data: dict[str, object]) -> str:
    """What the moved pin now names, and how its identity was checked."""
    target = data["target"]
    assert isinstance(target, dict)
    if target["kind"] == "release":
        how = f"`{target['wheel']}`, sha256 `{target['wheel_sha256']}` as the package index publishes it"
    else:
        how = f"git `{target['git_url']}` `{target['git_ref']}` at commit `{target['git_commit']}`"
    return f"The pin now names {how}; the series was refreshed on it."


def write_report(reports: Path, name: str, data: dict[str, object], text: str) -> Path:
    reports.mkdir(parents=True, exist_ok=True)
    out = reports / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}.json"
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    return out


def read_baseline(path: Path | None) -> set[str] | None:
    """The patches an earlier report found conflicting (None without --baseline); read before any work,
    so a missing or foreign file is refused, never taken for "no conflicts then"."""
    if path is None:
        return None
    fix = "pass a JSON report from .work/rebase/ (leave --baseline out on a first run)"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
        return {p["name"] for p in data["patches"] if p["outcome"] == "conflict"}
    except OSError as exc:
        raise RebaseError(f"--baseline {path}: {exc.strerror or exc}", fix) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise RebaseError(
            f"--baseline {path} is not a rebase report ({type(exc).__name__}: {exc})", fix
        ) from None


def new_conflicts(verdicts: list[Verdict], before: set[str] | None) -> list[str]:
    """Patches that conflict now and did not in the baseline report (all conflicts without one)."""
    return [v.name for v in verdicts if v.outcome == "conflict" and v.name not in (before or set())]


# ---- moving the pin ----------------------------------------------------------------


def pin_fields(target: Target) -> dict[str, str]:
    """The upstream.toml keys the target sets (each on its own `key = "..."` line)."""
    p = target.pin
    if target.kind == "release":
        return {
            "version": p.version,
            "filename": p.wheel_filename,
            "sha256": p.wheel_sha256,
            "tag": p.git_tag,
            "commit": "",
        }
    # the wheel fields stay those of the last release; the git source is the pin now
    return {"source": "git", "url": p.git_url, "tag": p.git_tag, "commit": p.git_commit}


def pin_by_hand(target: Target) -> str:
    """The edit of patches/upstream.toml that moves the pin to target, as a user makes it."""
    return "set in patches/upstream.toml " + ", ".join(
        f'{k} = "{v}"' for k, v in pin_fields(target).items()
    )


def moved_pin_text(text: str, target: Target) -> str:
    """upstream.toml with the target's fields set (comments and layout kept)."""
    for key, value in pin_fields(target).items():
        text, n = set_key(text, key, value)
        if n != 1:
            raise RebaseError(
                f"patches/upstream.toml has no single '{key} = ' line", "restore it from git"
            )
    return text


def series_note(target: Target, verdicts: list[Verdict], patches: list[Patch]) -> str:
    """Comment lines for patches/series saying which patches upstream has, and where."""
    where = (
        f"{target.ref} ({target.commit[:12]}) at {target.url}"
        if target.kind == "git"
        else target.pin.version
    )
    slugs = {p.name: p.slug for p in patches}
    return "".join(
        f"# dropped {slugs[v.name]}: {v.shown} in {where}\n"
        for v in verdicts
        if v.outcome in DROPPED
    )


class MoveInterrupted(RebaseError):
    """A signal ended rebase --move before its one swap: nothing of it was kept."""

    exit_code = 130


def refuse_local_work(ws: Workspace) -> None:
    """--move leaves a checkout that apply rebuilds: never over work that exists only there (apply's
    own guard), so that afterwards nothing waits to be exported and `nox -s apply` is all that is
    left to do."""
    state = read_state(ws.checkout) if (ws.checkout / ".git").is_dir() else None
    guard("replace", Inspection(ws.checkout, state))


def move(
    ws: Workspace,
    pin: Pin,
    target: Target,
    patches: list[Patch],
    repo: Path,
    verdicts: list[Verdict],
) -> None:
    """One transaction: the refreshed series, its note and the new pin are made in a copy of patches/,
    then swapped into patches/ in one step with signals held (journalled: a kill -9 is finished by
    the next command). A signal before the swap leaves patches/ and the pin as they were."""
    conflicts = [v.name for v in verdicts if v.outcome == "conflict"]
    if conflicts:
        raise RebaseError(
            f"not moving the pin: {', '.join(conflicts)} conflict(s) on {target.label}; nothing "
            "was changed",
            f"to resolve them on it: {pin_by_hand(target)}, then nox -s apply -- --3way (it stops "
            "at the first "
            "conflict: resolve, git add, nox -s apply -- --continue), then nox -s refresh; or keep "
            "the pin",
        )
    text = moved_pin_text(handfile.read(ws.pin_file, "patches/upstream.toml"), target)
    new_pin = parse_pin(text)
    if target.kind == "release":
        verify_digest(ws.downloads / new_pin.wheel_filename, new_pin.wheel_sha256)
        progress(
            f"{new_pin.wheel_filename}: sha256 {new_pin.wheel_sha256[:16]}... as the registry "
            "publishes it"
        )
    for v in verdicts:
        if v.outcome in DROPPED:
            progress(f"{v.name}: dropped from the series ({v.shown})")
    pristine = gitcmd.rev_parse(repo, PRISTINE_TAG)
    state = State(
        pin=new_pin.label,
        pin_digest=pin_digest(new_pin),
        pristine_commit=pristine,
        series_digest="",
        patches={},
        head=head(repo),
        status="applied",
    )
    write_state(repo, state)
    staged = repo.parent / "patches"
    shutil.copytree(ws.patches, staged, ignore=shutil.ignore_patterns(".*"))
    dropped = tuple(p.slug for p, v in zip(patches, verdicts, strict=True) if v.outcome in DROPPED)
    try:
        refresh(repo, staged, load_series(staged), progress=progress, drop=dropped)
    except RefreshInterrupted as exc:
        signal_name = exc.what.split(" by ", 1)[1].split()[0].rstrip(":")
        raise MoveInterrupted(
            f"rebase --move interrupted by {signal_name} while it refreshed the series aside: "
            "patches/ and the "
            "pin are as they were",
            "run it again",
        ) from None
    note = series_note(target, verdicts, patches)
    if note:
        series = (staged / "series").read_text(encoding="utf-8")
        header = series_header(series)
        (staged / "series").write_text(header + note + series[len(header) :], encoding="utf-8")
    (staged / "upstream.toml").write_text(text, encoding="utf-8")
    writes, removals = differences(ws.patches, staged)
    swap_into(ws.patches, writes, removals, then=lambda: None, by="rebase --move")
    progress(f"pin moved: {pin.label} -> {new_pin.label}; next: nox -s apply lint test")


def differences(patches: Path, staged: Path) -> tuple[dict[str, str], list[str]]:
    """(files of staged that patches/ lacks or holds otherwise, files of patches/ that staged lacks)."""
    new = {
        p.name: p.read_bytes()
        for p in staged.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }
    old = {
        p.name: p.read_bytes()
        for p in patches.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }
    writes = {name: data.decode("utf-8") for name, data in new.items() if old.get(name) != data}
    return writes, sorted(set(old) - set(new))


def test_texts(ws: Workspace, patches: list[Patch]) -> dict[str, str]:
    """The kit's regression suite, and the test files the series adds (their added lines), by name."""
    found = {
        str(f.relative_to(ws.root)): f.read_text(encoding="utf-8")
        for f in sorted(ws.regression.glob("*.py"))
    }
    for patch in patches:
        for hunk in diffparse.hunks(patch.text):
            if hunk.path.startswith("tests/"):
                found[f"{hunk.path} (from {patch.name})"] = "\n".join(hunk.added)
    return found
