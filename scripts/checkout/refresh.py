"""refresh: the checkout's commits back to patches/ and series, byte-stably (quilt refresh, without noise).

Plan the folds (each aimed at one patch by commit), replay the commits in that order if it is
new, rebuild each patch's commit with plumbing (fold, drop, one identity), check the result
(identities, conflict markers, round trip), then move the branch, swap the files into patches/
and record the state. Any failure or signal before the state is recorded puts the checkout back
as it was.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from scripts import diffparse, gitcmd, signals
from scripts.checkout import (
    BRANCH,
    PRISTINE_TAG,
    CheckoutError,
    IncompleteCheckout,
    LocalEdits,
    Progress,
    shown,
)
from scripts.checkout.apply import (
    finish,
    forget_last_good,
    heal_killed,
    undo_to,
    write_refresh_marker,
)
from scripts.checkout.foreign import is_generated
from scripts.checkout.guards import Inspection, guard
from scripts.checkout.state import REFRESHING, State, read_state
from scripts.digests import sha256_text
from scripts.errors import os_fix
from scripts.gitcmd import am, format_patch, head, last_line, rev_list, rev_parse
from scripts.pin import Pin
from scripts.series import (
    JOURNAL,
    SLUG_RULE,
    Patch,
    SeriesError,
    amend_slug_command,
    describe,
    entries_digest,
    patch_file_name,
    render_series,
    series_digest,
    slug_problem,
    split_trailers,
    squashed_slugs,
    staged_name,
    suggested_slug,
    trailer,
    trailer_values,
    with_one_identity,
)

FOLDS = {"fixup! ": "fixup", "squash! ": "squash", "amend! ": "amend"}
# `fixup! <sha>`: 7+ hex digits, so a word like "add" is a subject
SHA_NAME = re.compile(r"^[0-9a-f]{7,40}$")
REWORD = f"reword it (git rebase -i {PRISTINE_TAG}, reword): git format-patch/am cannot carry it; nothing was written"


class PatchesNotWritable(CheckoutError):
    """patches/ cannot be written; nothing in it was changed."""


class FoldError(CheckoutError):
    """A fold commit does not name exactly one patch, or cannot be moved under it."""


class NotRoundTrip(CheckoutError):
    """A commit would not come back unchanged from its exported patch."""


class RefreshInterrupted(CheckoutError):
    """A signal ended refresh; what was undone or kept is said."""

    exit_code = 130


class Ended(BaseException):
    """INT/TERM/HUP/QUIT during refresh, raised so that every cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass(frozen=True)
class Commit:
    """A commit as git stores it; the message byte-exact (surrogate-escaped where not UTF-8)."""

    sha: str
    tree: str
    parent: str
    author: tuple[str, str, str]  # name, e-mail, date ("<seconds> <zone>")
    message: str
    encoding: str = ""  # the commit's `encoding` header ("": none, UTF-8)

    @property
    def subject(self) -> str:
        """What git's `%s` (and so `git commit --fixup`) shows: the first paragraph on one line."""
        return " ".join(
            line.rstrip() for line in self.message.lstrip("\n").split("\n\n", 1)[0].splitlines()
        )

    @property
    def body(self) -> str:
        """The message after its subject paragraph: what a squash!/amend! commit brings."""
        parts = self.message.lstrip("\n").split("\n\n", 1)
        return parts[1].strip("\n") + "\n" if len(parts) > 1 and parts[1].strip() else ""

    @property
    def slugs(self) -> list[str]:
        return squashed_slugs(self.message)

    def shown(self) -> str:
        return f"commit {self.sha[:12]} ({self.subject[:60]!r})"


@dataclass
class Group:
    """A patch's commit and the folds aimed at it, in order."""

    patch: Commit
    # (fixup | squash | amend, commit)
    folds: list[tuple[str, Commit]] = field(default_factory=list)

    @property
    def commits(self) -> list[Commit]:
        return [self.patch, *(c for _, c in self.folds)]


def parse_commit(sha: str, raw: bytes) -> Commit:
    """A Commit from `git cat-file commit` output."""
    header, _, message = raw.partition(b"\n\n")
    fields: dict[str, str] = {}
    for line in header.decode("utf-8", "surrogateescape").splitlines():
        key, _, value = line.partition(" ")
        fields.setdefault(key, value)
    name_email, _, date = fields["author"].rpartition("> ")
    name, _, email = name_email.partition(" <")
    return Commit(
        sha,
        fields["tree"],
        fields.get("parent", ""),
        (name, email, date),
        message.decode("utf-8", "surrogateescape"),
        fields.get("encoding", ""),
    )


def read_commits(repo: Path, revs: str) -> list[Commit]:
    return [parse_commit(sha, gitcmd.cat_commit(repo, sha)) for sha in rev_list(repo, revs)]


def first_not_utf8(text: str) -> tuple[int, int] | None:
    """(line number, byte) of the first byte of text that is not UTF-8 (decoded with
    surrogateescape), None where all of it is."""
    at = next((i for i, ch in enumerate(text) if "\udc80" <= ch <= "\udcff"), None)
    return None if at is None else (text.count("\n", 0, at) + 1, ord(text[at]) - 0xDC00)


def refuse_not_utf8(checkout: Path, commits: list[Commit]) -> None:
    """Patch files are UTF-8, and git converts what is not (commit-tree takes other bytes for
    latin-1, format-patch re-encodes by the `encoding` header): a message, author or e-mail in other
    bytes would not come back byte for byte. Refused before anything is rebuilt or written, one way
    for every path (header or none, folded or not)."""
    utf8 = ("", "utf-8", "utf8")
    for c in commits:
        rebase = f"cd {shown(checkout)} && git rebase -i {PRISTINE_TAG}"
        reword = f"{rebase} (mark {c.sha[:12]} 'reword')"
        if c.encoding.lower() not in utf8:
            raise NotRoundTrip(
                f"{c.shown()}: its message is stored as {c.encoding} (an `encoding` header), and "
                "patch files are UTF-8: it would not come back byte for byte",
                f"write it again in UTF-8: {reword}, with i18n.commitEncoding unset; nothing was "
                "written",
            )
        fields = (("message", c.message), ("author name", c.author[0]), ("e-mail", c.author[1]))
        for what, text in fields:
            bad = first_not_utf8(text)
            if bad is None:
                continue
            line, byte = bad
            at = f"line {line}" if what == "message" else "its header"
            fix = (
                f"reword it in UTF-8: {reword}"
                if what == "message"
                else f"give it a UTF-8 author: {rebase} (mark {c.sha[:12]} 'edit'), git commit "
                "--amend --author='Name <e-mail>', git rebase --continue"
            )
            raise NotRoundTrip(
                f"{c.shown()}: its {what} is not UTF-8 (byte 0x{byte:02x} at {at}), and patch "
                "files are UTF-8: it would not come back byte for byte",
                f"{fix}; nothing was written",
            )


def refuse_merges(checkout: Path) -> None:
    """A series is one line of commits: a merge in it has no one parent to diff its patch against."""
    found = gitcmd.merges(checkout, f"{PRISTINE_TAG}..HEAD")
    if found:
        merge = parse_commit(found[0], gitcmd.cat_commit(checkout, found[0]))
        raise LocalEdits(
            f"{merge.shown()} is a merge: a patch series is one line of commits, a merge has no "
            "one parent to "
            "export against",
            f"flatten it: git rebase {PRISTINE_TAG} (replays the merged commits in a line, without "
            "the merge), "
            "then nox -s refresh",
        )


def fold_of(subject: str) -> tuple[str, str] | None:
    """(kind, the name it gives its target) of a fold's subject; `fixup! fixup! X` names X, as in git."""
    kind = next((k for prefix, k in FOLDS.items() if subject.startswith(prefix)), None)
    if kind is None:
        return None
    name = subject
    while name.startswith(tuple(FOLDS)):
        name = name.split(" ", 1)[1]
    return kind, name


def plan_folds(commits: list[Commit]) -> list[Group]:
    """Each commit is a patch or a fold aimed at exactly one earlier patch (FoldError otherwise)."""
    groups: list[Group] = []
    owner: dict[str, Group] = {}  # every commit seen so far -> its group (a fold may name a fold)
    for c in commits:
        fold = fold_of(c.subject)
        if fold is None:
            group = Group(c)
            groups.append(group)
        else:
            group = aimed_at(c, *fold, groups, owner)
            group.folds.append((fold[0], c))
        owner[c.sha] = group
    return groups


def aimed_at(
    fold: Commit, kind: str, name: str, groups: list[Group], owner: dict[str, Group]
) -> Group:
    """The group a fold names: by commit id, or by a subject only one patch matches.

    git's --autosquash takes the first exact subject, then the first subject the name
    prefixes: with two such patches it folds into one of them silently; the kit refuses.
    """
    by_commit = {
        id(g): g for sha, g in owner.items() if SHA_NAME.match(name) and sha.startswith(name)
    }
    if len(by_commit) == 1:
        return next(iter(by_commit.values()))
    matches = [g for g in groups if g.patch.subject == name or g.patch.subject.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    fix = f"name its patch by commit: git rebase -i {PRISTINE_TAG}, reword it to '{kind}! <commit>'"
    if not matches:
        raise FoldError(f"fold {fold.shown()} names no patch before it", f"{fix}, or drop it")
    choices = " or ".join(
        f"{g.patch.sha[:12]} ({', '.join(g.patch.slugs) or 'no slug'})" for g in matches
    )
    raise FoldError(
        f"fold {fold.shown()} matches {len(matches)} patches by subject: it could land in the "
        "wrong one",
        f"{fix} with <commit> = {choices}",
    )


def autosquash(
    checkout: Path, groups: list[Group], commits: list[Commit]
) -> dict[str, Commit] | None:
    """git's own `rebase -i --autosquash` folds the `fixup!` commits: old commit id -> the patch's
    folded commit; None (the checkout as it was) where git's way would break an edit-loop invariant,
    and the kit folds by hand (reorder, rebuild).

    Only where every fold is a `fixup!`: git's squash!/amend! joins messages through the commit
    editor and its cleanup (a `#` line dropped, the squash's text below the trailer block), which
    the round trip forbids. git aims by subject: its todo must be the kit's aim, by commit (the
    sequence editor checks it), else git does not start. Its result must keep each patch's message,
    author and final tree, else it is undone."""
    if not any(g.folds for g in groups) or any(
        kind != "fixup" for g in groups for kind, _ in g.folds
    ):
        return None
    expected = checkout / ".git" / "kit-autosquash-todo"
    expected.write_text(
        "".join(
            f"pick {g.patch.sha}\n" + "".join(f"fixup {c.sha}\n" for _, c in g.folds)
            for g in groups
        ),
        encoding="utf-8",
    )
    try:
        proc = gitcmd.rebase_autosquash(checkout, PRISTINE_TAG, expected)
    finally:
        expected.unlink(missing_ok=True)
    folded = read_commits(checkout, f"{PRISTINE_TAG}..HEAD") if proc.returncode == 0 else []
    kept = (
        len(folded) == len(groups)
        and folded[-1].tree == commits[-1].tree
        and all(
            new.message == g.patch.message and new.author == g.patch.author
            for g, new in zip(groups, folded, strict=True)
        )
    )
    if not kept:  # a conflict, an empty result git stops at, or other bytes: the kit's own way
        undo_to(checkout, commits[-1].sha)
        return None
    return {c.sha: new for g, new in zip(groups, folded, strict=True) for c in g.commits}


def reorder(checkout: Path, groups: list[Group], commits: list[Commit]) -> dict[str, Commit]:
    """Each fold right after its patch: old commit id -> the commit in that order (replayed only if
    new); plain fixups folded by git's autosquash where it keeps the invariants."""
    by_git = autosquash(checkout, groups, commits)
    if by_git is not None:
        return by_git
    wanted = [c for g in groups for c in g.commits]
    if [c.sha for c in wanted] == [c.sha for c in commits]:
        return {c.sha: c for c in commits}
    todo = checkout / ".git" / "kit-refresh-todo"
    todo.write_text("".join(f"pick {c.sha}\n" for c in wanted), encoding="utf-8")
    try:  # the kit's own todo (not git's subject matching); empty results are kept and judged below
        proc = gitcmd.rebase_todo(checkout, PRISTINE_TAG, todo)
    finally:
        todo.unlink(missing_ok=True)
    if proc.returncode != 0:
        unmerged = gitcmd.unmerged(checkout)
        why = (
            f"in {', '.join(unmerged[:3])}"
            if unmerged
            else f"({last_line(proc.stderr, proc.stdout)})"
        )
        raise FoldError(
            f"moving the folds under their patches conflicts {why}",
            f"fold by hand: git rebase -i {PRISTINE_TAG} (each fixup under its patch; resolve), "
            "then nox -s refresh",
        )
    replayed = read_commits(checkout, f"{PRISTINE_TAG}..HEAD")
    return {old.sha: new for old, new in zip(wanted, replayed, strict=True)}


def folded_message(group: Group, now: dict[str, Commit]) -> str:
    """The patch's message after its folds: fixup keeps it, squash appends (above the trailers), amend
    replaces."""
    message = now[group.patch.sha].message
    for kind, c in group.folds:
        body = now[c.sha].body
        if kind == "amend" and body:
            message = body
        # above the patch's trailer block, which stays last (git's rule)
        elif kind == "squash" and body:
            text, block = split_trailers(message)
            message = text.rstrip("\n") + "\n\n" + body + (f"\n{block}" if block else "")
    return message


def commit_tree(
    repo: Path, tree: str, parent: str, author: tuple[str, str, str], message: str
) -> Commit:
    """A new commit object (no ref moves); the author's date as committer date, so ids are stable."""
    name, email, date = author
    sha = gitcmd.commit_object(
        repo,
        tree,
        parent,
        message,
        {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": f"@{date}",
            "GIT_COMMITTER_DATE": f"@{date}",
        },
    )
    return Commit(sha, tree, parent, author, message)


def rebuild(
    checkout: Path, groups: list[Group], now: dict[str, Commit], drop: list[str]
) -> list[Commit]:
    """One commit per patch: folds folded, a dropped empty patch left out, a squash kept under one
    slug.

    Trees never change, so nothing can conflict; an unchanged commit keeps its id.
    """
    parent = rev_parse(checkout, PRISTINE_TAG)
    parent_tree = rev_parse(checkout, f"{PRISTINE_TAG}^{{tree}}")
    out: list[Commit] = []
    for group in groups:
        first, last = now[group.patch.sha], now[group.commits[-1].sha]
        message = folded_message(group, now)
        slugs = squashed_slugs(message)
        bad = next((s for s in slugs if slug_problem(s)), None) if slugs else ""
        if bad is not None:
            raise bad_slug(checkout, first, bad)
        drops = " ".join(f"--drop {s}" for s in slugs)
        if last.tree == parent_tree:
            if all(s in drop for s in slugs):
                continue  # the user said so: the empty patch goes
            raise SeriesError(
                f"patch {' and '.join(slugs)} became empty: {first.shown()} changes nothing",
                f"leave it out: nox -s refresh -- {drops}",
            )
        kept = [s for s in slugs if s not in drop]
        if len(slugs) > 1:
            if len(kept) != 1:
                raise SeriesError(
                    f"{first.shown()} holds patches {' and '.join(slugs)} (a squash)",
                    "keep one identity: nox -s refresh -- "
                    f"{' '.join(f'--drop {s}' for s in slugs[1:])} "
                    f"(keeps {slugs[0]}, whose subject it has)",
                )
            message = with_one_identity(message, kept[0])
        if group.folds or message != first.message or first.parent != parent:
            first = commit_tree(checkout, last.tree, parent, first.author, message)
        out.append(first)
        parent, parent_tree = first.sha, first.tree
    return out


def bad_slug(checkout: Path, commit: Commit, slug: str) -> SeriesError:
    """The refusal of a commit's Kit-Patch: value, with a fix that works as written (on HEAD, or by an
    edit stop)."""
    good = suggested_slug(slug, commit.subject)
    had = len(trailer_values(commit.message, "Kit-Patch"))
    amend = amend_slug_command(good, not trailer_values(commit.message, "Upstream-Status"), had)
    where = f"cd {shown(checkout)} && {amend}"
    if commit.sha != head(checkout):
        where = (
            f"cd {shown(checkout)} && git rebase -i {PRISTINE_TAG} (mark {commit.sha[:12]} "
            "'edit'), then "
            f"{amend}, then git rebase --continue"
        )
    return SeriesError(
        f"{commit.shown()} {slug_problem(slug)}",
        f"{SLUG_RULE}; fix it: {where}; then nox -s refresh",
    )


def check_accounting(
    checkout: Path, commits: list[Commit], old: list[Patch], drop: list[str]
) -> None:
    """Every patch of the series is held once, or dropped by name; a --drop names something real."""
    by_slug: dict[str, str] = {}
    for c in commits:
        slug = c.slugs[-1]
        if slug in by_slug:
            raise SeriesError(
                f"commits {by_slug[slug][:12]} and {c.sha[:12]} both carry Kit-Patch: {slug}",
                f"give the newer one its own slug: in {shown(checkout)}, git rebase -i "
                f"{PRISTINE_TAG} (mark "
                f"{c.sha[:12]} 'edit'), {amend_slug_command(slug + '-2', False)}, git rebase "
                "--continue",
            )
        by_slug[slug] = c.sha
    series_slugs = {p.slug for p in old}
    held = {s for c in read_commits(checkout, f"{PRISTINE_TAG}..HEAD") for s in c.slugs}
    unknown = [s for s in drop if s not in series_slugs and s not in held]
    if unknown:
        raise SeriesError(
            f"--drop {unknown[0]}: no patch of the series has that slug",
            f"name one of: {', '.join(p.slug for p in old)}",
        )
    kept = [s for s in drop if s in by_slug]
    if kept:
        raise SeriesError(
            f"--drop {kept[0]}: the checkout still holds that patch",
            f"remove its commit first (git rebase -i {PRISTINE_TAG}), or do not drop it",
        )
    missing = [p for p in old if p.slug not in by_slug and p.slug not in drop]
    if missing:
        raise IncompleteCheckout(
            f"{shown(checkout)} lacks {', '.join(p.name for p in missing)}: refresh would delete "
            f"{'it' if len(missing) == 1 else 'them'} from patches/",
            f"run nox -s apply to get every patch back, or say so: nox -s refresh -- "
            f"{' '.join(f'--drop {p.slug}' for p in missing)}",
        )


# git's conflict markers (marker size 7): `<<<<<<< x`, `||||||| x` (diff3), `>>>>>>> x`. A `=======` line is one
# only between the others (git's rule), which are then refused themselves: alone it is text (an RST underline).
CONFLICT_MARKER = re.compile(r"^(?:<{7}|\|{7}|>{7})(?: |$)")


def check_resolved(checkout: Path, commits: list[Commit]) -> None:
    """No commit adds a conflict marker line, in any file: `git diff --check` semantics, but also where
    .gitattributes calls a file binary (`--check` skips those, a patch would carry them all the
    same)."""
    for c in commits:
        diff = gitcmd.diff_as_text(checkout, c.parent, c.sha).decode("utf-8", "replace")
        marker = next(
            (
                f"{f.path}:{n}"
                for f in diffparse.parse(diff)
                for n, text in f.added
                if CONFLICT_MARKER.match(text.rstrip("\r"))
            ),
            None,
        )
        if marker:
            raise LocalEdits(
                f"{c.shown()} leaves a conflict marker at {marker}",
                "finish the resolution (remove the <<<<<<< ======= >>>>>>> lines, git commit "
                "--fixup), then refresh",
            )


def first_difference(ours: str, theirs: str) -> tuple[int, str | None, str | None] | None:
    """(line number, our line, their line) of the first line that differs, None when equal."""
    for n, (a, b) in enumerate(itertools.zip_longest(ours.split("\n"), theirs.split("\n")), 1):
        if a != b:
            return n, a, b
    return None


def round_trip(checkout: Path, commits: list[Commit], texts: list[str]) -> None:
    """Apply the exported texts from pristine as apply does, in a scratch worktree; each commit must
    come back with the same message (byte for byte) and tree, or NotRoundTrip names the commit and
    the line."""
    scratch = checkout.with_name(f".{checkout.name}.roundtrip")
    patch_file = checkout / ".git" / "kit-roundtrip.patch"
    drop_worktree(checkout, scratch)
    gitcmd.worktree_add(checkout, scratch, PRISTINE_TAG)
    try:
        for c, text in zip(commits, texts, strict=True):
            patch_file.write_bytes(text.encode("utf-8", "surrogateescape"))
            proc = am(scratch, patch_file)
            if proc.returncode != 0:  # the message am read (it keeps it while paused) may say why
                parsed = gitcmd.git_path(scratch, "rebase-apply/final-commit")
                said = (
                    parsed.read_bytes().decode("utf-8", "surrogateescape")
                    if parsed.is_file()
                    else c.message
                )
                back = replace(c, message=said)
            else:
                back = parse_commit("HEAD", gitcmd.cat_commit(scratch, "HEAD"))
            diff = first_difference(c.message, back.message)
            if diff:
                n, ours, theirs = diff
                came = "is lost" if theirs is None else f"comes back as {theirs[:60]!r}"
                said = "(an added line)" if ours is None else repr(ours[:60])
                raise NotRoundTrip(
                    f"{c.shown()}: message line {n} {said} {came} after export", REWORD
                )
            if proc.returncode != 0:
                why = next(
                    (line for line in proc.stderr.splitlines() if line.startswith("error:")),
                    proc.stderr,
                )
                raise NotRoundTrip(
                    f"{c.shown()} does not apply from its own patch ({last_line(why)})", REWORD
                )
            if back.tree != c.tree:
                paths_ = gitcmd.changed_between(checkout, c.tree, back.tree)
                raise NotRoundTrip(
                    f"{c.shown()}: {paths_[0] if paths_ else 'its tree'} differs after export",
                    "report it with the commit; export it by hand meanwhile",
                )
    finally:
        patch_file.unlink(missing_ok=True)
        drop_worktree(checkout, scratch)


def drop_worktree(checkout: Path, scratch: Path) -> None:
    """Remove the scratch worktree and its registration, also one a signal left locked mid-`worktree
    add` (prune skips locked entries, and the next `worktree add` would refuse the path)."""
    gitcmd.worktree_remove(checkout, scratch)  # fails when not registered
    shutil.rmtree(scratch, ignore_errors=True)
    gitcmd.worktree_prune(checkout)


def refresh(
    checkout: Path,
    patches_dir: Path,
    old: list[Patch],
    *,
    progress: Progress,
    drop: tuple[str, ...] = (),
    pin: Pin | None = None,
) -> list[tuple[str, str]]:
    """Write the checkout's commits back to patches/ byte-stably; returns (name, outcome) rows.

    Writes nothing unless the checkout holds every patch of the series (or the user named
    the ones to drop) and each commit survives export; then all new files are written aside
    and swapped in at once, and the branch moves to the folded commits. With pin, the
    checkout must have been built from it and from these patches/ (provenance).
    """
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is not None:
        heal_killed(checkout, state, series_digest(old), progress)
    # swap_into's, from a refresh killed outright (kill -9)
    for stale in patches_dir.glob(".*.kit-tmp"):
        stale.unlink()
    # nothing changed yet
    guard("export", Inspection(checkout, state, None if pin is None else (pin, old)))
    assert state is not None  # "export" refuses a missing state
    start, recorded = head(checkout), []
    # until the end: after a kill -9 the next command undoes
    write_refresh_marker(checkout, {"start": start})
    started = checkout / ".git" / REFRESHING
    try:
        with endings_raised():
            try:
                rows = write_back(checkout, patches_dir, old, state, drop, progress, recorded)
            except BaseException:
                if not recorded:
                    with signals.held():  # a second Ctrl-C waits until the checkout is whole again
                        undo_to(checkout, start)
                raise
            finally:
                started.unlink(missing_ok=True)
    except Ended as exc:
        raise interrupted(exc.signum, bool(recorded), start) from None
    for name, outcome in rows:
        progress(f"{name}: {outcome}")
    left_out = [name for name in gitcmd.ignored(checkout) if not is_generated(name)]
    if left_out:  # never silently: a file git ignores is in no patch unless added with -f
        progress(
            f"note: {len(left_out)} file(s) git ignores in {shown(checkout)} are in no patch "
            "(first: "
            f"{left_out[0]}); git add -f one and commit it to put it in a patch"
        )
    return rows


def write_back(
    checkout: Path,
    patches_dir: Path,
    old: list[Patch],
    state: State,
    drop: tuple[str, ...],
    progress: Progress,
    recorded: list[bool],
) -> list[tuple[str, str]]:
    """refresh's steps on a checkout it may read; appends to recorded once the new state is on disk."""
    refuse_merges(checkout)
    commits = read_commits(checkout, f"{PRISTINE_TAG}..HEAD")
    refuse_not_utf8(checkout, commits)
    groups = plan_folds(commits)
    final = rebuild(checkout, groups, reorder(checkout, groups, commits), list(drop))
    check_accounting(checkout, final, old, list(drop))
    check_resolved(checkout, final)
    texts = [format_patch(checkout, c.sha) for c in final]
    if len(commits) > len(groups):
        progress("folded fixup!/squash!/amend! commits into the patches they name")
    new_head = final[-1].sha if final else rev_parse(checkout, PRISTINE_TAG)
    # the state's head came from these very files: no need to re-check it
    if new_head != state.head:
        round_trip(checkout, final, texts)
    pairs = zip(final, texts, strict=True)
    exported = [(patch_file_name(i, c.slugs[-1]), t) for i, (c, t) in enumerate(pairs, 1)]
    new = [
        replace(describe(c.shown(), t, patches_dir / name), name=name)
        for c, (name, t) in zip(final, exported, strict=True)
    ]
    rows, writes, removals = plan_writes(patches_dir, old, exported, drop)

    def record() -> None:
        state.series_digest = series_digest(new)
        state.patches = {name: sha256_text(t) for name, t in exported}
        finish(checkout, state, exported_head=new_head)  # no git runs here: the signals are held
        recorded.append(True)
        # recorded: nothing for a next command to undo
        (checkout / ".git" / REFRESHING).unlink(missing_ok=True)

    # what the state will say, for a next command when a kill -9 lands between the swap and the
    # record
    digest = entries_digest([(name, t.encode("utf-8", "surrogateescape")) for name, t in exported])
    write_refresh_marker(
        checkout,
        {
            "head": new_head,
            "series_digest": digest,
            "patches": {name: sha256_text(t) for name, t in exported},
        },
    )
    # the branch moves first: until the state is recorded, any failure or signal puts it back
    gitcmd.update_ref(
        checkout, f"refs/heads/{BRANCH}", new_head, head(checkout), message="kit refresh"
    )
    swap_into(patches_dir, writes, removals, then=record)
    forget_last_good(checkout)
    return rows


def plan_writes(
    patches_dir: Path, old: list[Patch], exported: list[tuple[str, str]], drop: tuple[str, ...]
) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    """(rows to show, files to write, files to remove) for the exported (name, text) pairs."""
    old_texts = {p.name: p.text for p in old}
    rows, writes = [], {}
    for name, text in exported:
        outcome = (
            "unchanged"
            if old_texts.get(name) == text
            else ("updated" if name in old_texts else "new")
        )
        if outcome != "unchanged":
            writes[name] = text
        rows.append((name, outcome))
    kept = {name for name, _ in exported}
    removals = [p.name for p in old if p.name not in kept]
    rows += [
        (name, "dropped" if any(p.name == name and p.slug in drop for p in old) else "renamed away")
        for name in removals
    ]
    series_file = patches_dir / "series"
    old_series = series_file.read_text(encoding="utf-8") if series_file.is_file() else ""
    new_entries = [(name, str(trailer(text, "Kit-Patch"))) for name, text in exported]
    series_text = render_series(old_series, {p.name: p.slug for p in old}, new_entries)
    if series_text != old_series:
        writes["series"] = series_text
    return rows, writes, removals


def interrupted(signum: int, recorded: bool, start: str) -> RefreshInterrupted:
    name = signal.Signals(signum).name
    if recorded:
        return RefreshInterrupted(
            f"refresh interrupted by {name} after patches/ was written and recorded",
            "nothing to redo: patches/ matches the checkout",
        )
    return RefreshInterrupted(
        f"refresh interrupted by {name}: the kit undid its own steps (HEAD back at {start[:12]}, "
        "no rebase left "
        "paused) and patches/ is unchanged",
        "run nox -s refresh again",
    )


def swap_into(
    patches_dir: Path,
    writes: dict[str, str],
    removals: list[str],
    then: Callable[[], None],
    by: str = "refresh",
) -> None:
    """Write every new file aside, then rename them all into place and run then, with signals held
    back.

    A full disk or a read-only folder fails in the first phase, which changes nothing; the
    second phase only renames and records, and INT/TERM/HUP/QUIT wait until it is done. Its
    journal (patches/.kit-swap.json) lets the next reader of the series finish it after a kill -9.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for name, text in writes.items():
            tmp = patches_dir / staged_name(name)
            staged.append((tmp, patches_dir / name))
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        failed = staged[-1][1].name if staged else "?"
        raise PatchesNotWritable(
            f"cannot write patches/{failed} ({exc.strerror or exc}); patches/ is unchanged",
            os_fix(exc, "patches/"),
        ) from None
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    journal = patches_dir / JOURNAL
    with signals.held():
        aside = patches_dir / staged_name(JOURNAL)
        aside.write_text(
            json.dumps({"by": by, "writes": list(writes), "removals": removals}), encoding="utf-8"
        )
        os.replace(aside, journal)
        for tmp, target in sorted(staged, key=lambda st: st[1].name == "series"):  # the series last
            os.replace(tmp, target)
        for name in removals:
            (patches_dir / name).unlink(missing_ok=True)
        then()
        journal.unlink()


@contextlib.contextmanager
def endings_raised() -> Iterator[None]:
    """INT/TERM/HUP/QUIT raise Ended inside the block, so refresh can undo its steps and say so."""

    def ended(signum: int, _frame: object) -> None:
        raise Ended(signum)

    with signals.handled(ended):
        yield
