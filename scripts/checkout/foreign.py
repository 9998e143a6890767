"""What the kit did not make and never deletes: a path under .work/ that is not its checkout, and in a
checkout the user's refs, ignored files, exclude lines, attributes and hooks, which a new pin's
checkout takes over."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import BRANCH, PRISTINE_TAG, CheckoutError, LocalEdits, NotKitMade, shown

KIT_MARK = "kit-made"  # in .git/: the kit made this repository and may replace it
# Files that running code leaves in a tree; never "edits", and never in a patch (a `.coveragerc` is
# neither).
GENERATED = (
    "__pycache__/",
    "*.py[co]",
    ".pytest_cache/",
    ".coverage",
    ".coverage.*",
    ".benchmarks/",
)


def is_kit_made(path: Path) -> bool:
    """True when the kit made path (its marker is there) or path holds nothing of anyone's."""
    if path.is_symlink() or not path.is_dir():
        return False
    git_dir = path / ".git"
    if (git_dir / KIT_MARK).is_file() or (git_dir / "kit-state.json").is_file():
        return True
    return all(entry.name == ".git" for entry in path.iterdir())


def refuse_foreign(path: Path) -> None:
    """Refuse to replace or delete something under .work/ that the kit did not make."""
    if not (path.exists() or path.is_symlink()) or is_kit_made(path):
        return
    kind = (
        "a symbolic link"
        if path.is_symlink()
        else "a file"
        if path.is_file()
        else "a folder the kit did not make"
    )
    raise NotKitMade(
        f".work/{path.name} is {kind}, not a kit checkout",
        "move it away (the kit never deletes it, nor works through a link), then run again",
    )


def remove_kit_made(path: Path) -> None:
    refuse_foreign(path)
    if path.exists():
        shutil.rmtree(path)


def is_generated(path: str) -> bool:
    """A path that .git/info/exclude (GENERATED) keeps out of every commit."""
    parts = path.split("/")
    return any(
        any(
            fnmatch.fnmatch(part, g.rstrip("/"))
            for part in (parts[:-1] if g.endswith("/") else parts[-1:])
        )
        for g in GENERATED
    )


def is_kits_ref(ref: str) -> bool:
    return ref in (
        f"refs/heads/{BRANCH}",
        f"refs/tags/{PRISTINE_TAG}",
        "refs/stash",
    ) or ref.startswith("refs/kit/")


def users_refs(checkout: Path) -> list[str]:
    """The refs of the checkout that the kit did not make: branches, tags, notes, remotes of the user's
    (and the PR branches `pr` made), which a new pin's checkout takes over (invariant 7)."""
    return [ref for ref in gitcmd.refs(checkout) if not is_kits_ref(ref)]


def refuse_unmovable(checkout: Path) -> None:
    """What a new pin's checkout cannot take over is refused, named, before anything changes: stash
    entries (a reflog, not refs) and work trees of the user's (they point into this .git)."""
    where = shown(checkout)
    stashes = gitcmd.stash_entries(checkout)
    if stashes:
        raise LocalEdits(
            f"{where} holds {stashes} stash entr{'y' if stashes == 1 else 'ies'}, which a checkout "
            "of the new pin "
            "cannot take over",
            f"keep each as a branch (cd {where} && git stash branch <name>; a new pin's checkout "
            "keeps branches) "
            "or drop it (git stash drop), then apply again",
        )
    scratch = checkout.with_name(f".{checkout.name}.roundtrip").resolve()
    trees = [t for t in gitcmd.linked_worktrees(checkout) if t.resolve() != scratch]
    if trees:
        raise LocalEdits(
            f"{where} has {len(trees)} work tree(s) of yours (first: {trees[0]}), which a checkout "
            "of the new pin "
            "cannot take over",
            f"remove them (git -C {where} worktree remove <path>; commit what you want to keep to "
            "a branch first), "
            "then apply again",
        )


def outermost(names: list[str]) -> list[str]:
    """names without those inside another of them: git lists an ignored folder that carries its own
    .gitignore (`*`: .ruff_cache, .mypy_cache, a uv or virtualenv venv) and its entries too, and a
    folder moved whole takes them along."""
    folders = {n.rstrip("/") for n in names if n.endswith("/")}

    def inside(name: str) -> bool:
        parts = name.rstrip("/").split("/")
        return any("/".join(parts[:i]) in folders for i in range(1, len(parts)))

    return [n for n in names if not inside(n)]


def moves(old: Path, new: Path, names: list[str]) -> list[str]:
    """What to rename from old into new for the user's ignored names: each whole, except a folder the
    new tree has too, whose entries are merged into it; LocalEdits naming the first that the new
    tree has as a file (or as a file where a folder of it would go), before anything moves."""
    out: list[str] = []
    for name in outermost(names):
        plain = name.rstrip("/")
        blocker = next(
            (
                parent
                for parent in Path(plain).parents
                if str(parent) != "." and ((new / parent).is_file() or (new / parent).is_symlink())
            ),
            None,
        )
        target, source = new / plain, old / plain
        folders = (
            target.is_dir()
            and not target.is_symlink()
            and source.is_dir()
            and not source.is_symlink()
        )
        if folders and blocker is None:
            out += moves(old, new, sorted(f"{plain}/{p.name}" for p in source.iterdir()))
            continue
        if blocker is not None or target.exists() or target.is_symlink():
            raise LocalEdits(
                f"{shown(old)}/{name} (ignored by git, yours) has the name of a file of the new pin's "
                "tree",
                f"move it out of {shown(old)}, then apply again",
            )
        out.append(plain)
    return out


def users_ignored(old: Path, new: Path) -> list[str]:
    """The old checkout's ignored files and folders that are not GENERATED (the user's: .idea/, .venv/,
    notes), to move into the new checkout, each once; refused, named, when the new tree has a file
    of that name."""
    return moves(old, new, [name for name in gitcmd.ignored(old) if not is_generated(name)])


def carry_git_files(old: Path, new: Path) -> None:
    """What the user keeps in the old checkout's .git besides refs: its exclude lines the new one lacks
    (appended), its info/attributes, and hooks of theirs (not git's *.sample ones; the kit's own
    gits never run hooks)."""
    source, target = old / ".git" / "info" / "exclude", new / ".git" / "info" / "exclude"
    have = target.read_text(encoding="utf-8").splitlines()
    lines = (
        source.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
        if source.is_file()
        else []
    )
    extra = [line for line in lines if line not in have]
    if extra:
        target.write_text(
            "".join(f"{line}\n" for line in [*have, *extra]),
            encoding="utf-8",
            errors="surrogateescape",
        )
    hooks = [p for p in (old / ".git" / "hooks").glob("*") if p.is_file() and p.suffix != ".sample"]
    for path in [old / ".git" / "info" / "attributes", *hooks]:
        if path.is_file():
            dest = new / path.relative_to(old)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


def move_over(old: Path, new: Path, names: list[str]) -> None:
    """Rename each name from old into new (same place); on a failure every one moved goes back, then it
    raises."""
    moved: list[tuple[Path, Path]] = []
    try:
        for name in names:
            source, target = old / name.rstrip("/"), new / name.rstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
            moved.append((source, target))
    except OSError as exc:
        for source, target in reversed(moved):
            target.rename(source)
        raise CheckoutError(
            f"cannot move {name} (ignored, yours) into the new checkout ({exc.strerror or exc})",
            f"move it out of {shown(old)} yourself, then apply again (nothing was changed)",
        ) from None
