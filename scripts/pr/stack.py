"""The stack: the upstream PRs the series is sent as, in merge order (patches/stack.toml).

The file is edited by hand and read against a schema (one-line refusals, nothing written):

    [[pr]]
    name = "rope-2d-cos-sin"      # the branch name part: pr/<name>/vN; [a-z0-9-], unique
    title = "[Bugfix] ..."        # the PR title, one line with upstream's prefix
    patches = ["0001-rope-2d-cos-sin", "0002-rope-2d-cos-sin-test"]
    over_limit = "why"            # optional; required when the PR changes over 500 lines
    notes = ["..."]               # optional: the PR body's notes for reviewers

    [held]                        # patches sent in no PR, each with why
    "0006-npu-usp4-eager-config" = "why"

A patch is named by its Kit-Patch slug or by its file name without `.patch`. Every series patch is
in exactly one PR or in [held]; each PR is a contiguous run of the series with the held patches
left out, and the PRs follow the series order. PR k is sent on the target plus PRs 1..k-1. Without
the file the whole series is one PR named "series", titled by patches/cover.md.

Which of a PR's tests need a later patch is found from the tests' own source (dependency_problems):
each name a test file the PR adds imports from `vllm_omni` (``from vllm_omni.m import f``) or reads
off an imported `vllm_omni` module (``m.f``) must exist in that module on the PR's prefix; a name
the prefix lacks and a later PR's tree has is a refusal naming the PR, the test file and the name.
It never refuses a name the prefix has (no false alarm); a name used only dynamically
(``getattr``) is left to running the PR's own tests on its prefix (scripts/pr/stackcheck.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from scripts import handfile
from scripts.checks import scope
from scripts.digests import sha256_text
from scripts.errors import KitError
from scripts.series import Patch

NAME = "stack.toml"
WHERE = f"patches/{NAME}"
PR_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
TITLE_MAX = 100  # a PR title (not a commit subject): GitHub shows about this much in a list
PR_KEYS = {"name": str, "title": str, "patches": list, "over_limit": str, "notes": list}
REQUIRED = ("name", "title", "patches")
FIX = f"fix it (format: scripts/pr/stack.py), or restore it: git checkout -- {WHERE}"


class StackError(KitError):
    """patches/stack.toml is missing, malformed, or does not fit the series."""


@dataclass(frozen=True)
class Pr:
    """One upstream PR of the stack."""

    index: int  # 1-based, merge order
    name: str
    title: str
    patches: tuple[Patch, ...]
    over_limit: str
    notes: tuple[str, ...]

    def branch(self, label: str) -> str:
        return f"pr/{self.name}/{label}"

    @property
    def folder(self) -> str:
        """Its folder in .work/pr/vN/."""
        return f"{self.index}-{self.name}"


@dataclass(frozen=True)
class Stack:
    prs: tuple[Pr, ...]
    held: tuple[tuple[Patch, str], ...]  # (patch, why), series order
    digest: str = ""  # sha256 of the file's text (a changed stack is a new revision)
    source: str = ""  # the file's text as written

    def sent(self) -> list[Patch]:
        """The patches the PRs carry, in series order (held ones left out)."""
        return [p for pr in self.prs for p in pr.patches]


def refuse(what: str, fix: str = FIX) -> StackError:
    return StackError(f"{WHERE}: {what}", fix)


def typed(where: str, key: str, value: object, kind: type) -> None:
    if not isinstance(value, kind):
        shown = "a list" if kind is list else "a string"
        raise refuse(f"{where} {key} is a TOML {type(value).__name__}, not {shown}")


def resolve(entry: str, patches: Sequence[Patch], where: str) -> Patch:
    """The patch an entry names: its slug or its file name without .patch."""
    found = [p for p in patches if entry in (p.slug, p.name.removesuffix(".patch"))]
    if not found:
        raise refuse(
            f"{where} names {entry!r}, which is no patch of patches/series",
            f"name a patch by its Kit-Patch slug or file name ({', '.join(p.slug for p in patches)})"
            f", or restore it: git checkout -- {WHERE}",
        )
    return found[0]


def pr_entry(i: int, table: object, patches: Sequence[Patch]) -> Pr:
    where = f"[[pr]] #{i}"
    if not isinstance(table, dict):
        raise refuse(f"{where} is not a table")
    unknown = sorted(set(table) - set(PR_KEYS))
    if unknown:
        raise refuse(
            f"{where} has the unknown key {unknown[0]!r} (known: {', '.join(PR_KEYS)})",
            f"remove or rename it (a note of yours goes in a # comment), or restore it: git checkout "
            f"-- {WHERE}",
        )
    for key in REQUIRED:
        if key not in table:
            raise refuse(f"{where} has no {key} = line")
    for key, value in table.items():
        typed(where, key, value, PR_KEYS[key])
    name = table["name"]
    where = f"[[pr]] {name!r}"
    if not PR_NAME.match(name):
        raise refuse(
            f"{where}: the name must be 1 to 40 characters of a-z, 0-9 and '-' (a branch name part)"
        )
    title = table["title"]
    if not title.strip() or "\n" in title or len(title) > TITLE_MAX:
        raise refuse(
            f"{where}: the title must be one line of 1 to {TITLE_MAX} characters (it has "
            f"{len(title)})"
        )
    if not title.startswith("["):
        raise refuse(
            f"{where}: the title {title[:30]!r} has no upstream prefix ([Bugfix], [NPU], ...)"
        )
    if not table["patches"]:
        raise refuse(f"{where} has no patches")
    if "over_limit" in table and not table["over_limit"].strip():
        raise refuse(f"{where}: over_limit is empty (say why the PR is over the limit, or drop it)")
    for key in ("patches", "notes"):
        for item in table.get(key, []):
            if not isinstance(item, str) or not item.strip():
                raise refuse(f"{where} {key} holds {item!r}, not a non-empty string")
    found = tuple(resolve(e, patches, where) for e in table["patches"])
    return Pr(i, name, title, found, table.get("over_limit", ""), tuple(table.get("notes", [])))


def parse(text: str, patches: Sequence[Patch]) -> Stack:
    """The stack a hand-edited file declares for the series `patches`, or StackError (one line)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise refuse(f"is not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {"pr", "held"})
    if unknown:
        raise refuse(f"has the unknown key {unknown[0]!r} (known: [[pr]] tables, [held])")
    entries = data.get("pr")
    if not isinstance(entries, list) or not entries:
        raise refuse("declares no PR (one [[pr]] table per upstream PR, in merge order)")
    prs = [pr_entry(i, e, patches) for i, e in enumerate(entries, 1)]
    held_table = data.get("held", {})
    if not isinstance(held_table, dict):
        raise refuse('held is not a table of "patch" = "why" lines')
    held = []
    for entry, why in held_table.items():
        if not isinstance(why, str) or not why.strip():
            raise refuse(f"[held] {entry!r} needs its reason as a non-empty string")
        held.append((resolve(entry, patches, "[held]"), why))
    return Stack(tuple(prs), tuple(sorted(held, key=lambda h: patches.index(h[0]))))


def check_cover(stack: Stack, patches: Sequence[Patch]) -> None:
    """Every patch exactly once; names unique; each PR a contiguous run, PRs in series order."""
    names = [pr.name for pr in stack.prs]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise refuse(f"two PRs are named {dup!r} (the name is the branch's: unique)")
    seen: dict[str, str] = {}
    for owner, patch in [(f"PR {pr.name!r}", p) for pr in stack.prs for p in pr.patches] + [
        ("[held]", p) for p, _ in stack.held
    ]:
        if patch.name in seen:
            raise refuse(
                f"{patch.name} is in {seen[patch.name]} and in {owner}",
                f"keep it in one PR or in [held], or restore it: git checkout -- {WHERE}",
            )
        seen[patch.name] = owner
    missing = [p.name for p in patches if p.name not in seen]
    if missing:
        raise refuse(
            f"{missing[0]} is in no PR and not in [held]",
            f'add it to the PR that carries it, or hold it: [held] "{missing[0][:-6]}" = "why"',
        )
    order = [p for p in patches if p.name not in {h.name for h, _ in stack.held}]
    at = 0
    for pr in stack.prs:
        run = order[at : at + len(pr.patches)]
        if list(pr.patches) != run:
            expected = ", ".join(p.name[:-6] for p in run)
            raise refuse(
                f"PR {pr.name!r} is not the next contiguous run of the series: after the PRs "
                f"before it, it would hold {expected or 'nothing'}",
                "list each PR's patches in series order, one run after the other (held ones left "
                f"out), or restore it: git checkout -- {WHERE}",
            )
        at += len(pr.patches)


DEFAULT_NAME = "series"


def load(patches_dir: Path, patches: Sequence[Patch], title: str) -> Stack:
    """The declared stack; without patches/stack.toml the whole series is one PR named "series",
    titled by the cover (the series' own title)."""
    path = patches_dir / NAME
    if not path.is_file():
        return Stack((Pr(1, DEFAULT_NAME, title, tuple(patches), "", ()),), ())
    text = handfile.read(path, WHERE)
    stack = replace(parse(text, patches), digest=sha256_text(text), source=text)
    check_cover(stack, patches)
    return stack


# ---- invariants over the PRs ----------------------------------------------------------------


def size(pr: Pr) -> int:
    """Changed lines (added + removed) of the PR, as upstream's threshold counts them."""
    return scope.total([scope.of_patch(p.name, p.text) for p in pr.patches]).changed


def size_problems(stack: Stack) -> list[str]:
    """Each PR over upstream's line threshold that does not say why."""
    return [
        f"PR {pr.name!r} changes {n} lines, over upstream's {scope.RFC_THRESHOLD}: split it, or say "
        f'why in its over_limit = "..." ({WHERE})'
        for pr in stack.prs
        if (n := size(pr)) > scope.RFC_THRESHOLD and not pr.over_limit
    ]


CHECK_RECORD = "stack-check"  # .work/records/stack-check.json: each PR's own tests on its base


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.startswith("tests/") and name.startswith("test_") and name.endswith(".py")


def own_test_files(pr: Pr) -> list[str]:
    """The test files the PR adds or changes: what its reviewers run, and what must pass on its
    base (a PR whose tests extend an earlier PR's test file owns that file's tests too)."""
    return list(
        dict.fromkeys(
            f for p in pr.patches for f in scope.of_patch(p.name, p.text).files if is_test_file(f)
        )
    )


def module_file(module: str) -> tuple[str, str]:
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def defined_names(source: str) -> set[str]:
    """Names a module binds at its top level (defs, classes, assignments, imports)."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def used_names(source: str) -> list[tuple[str, str]]:
    """(vllm_omni module, name) pairs a test imports from a module or reads off an imported one."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    uses: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "vllm_omni":
                continue
            for a in node.names:
                uses.append((node.module, a.name))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "vllm_omni" and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            uses.append((aliases[node.value.id], node.attr))
    return list(dict.fromkeys(uses))


Reader = Callable[[str, str], str | None]  # (commit, path) -> the file's text there, None if absent


def has_name(read: Reader, commit: str, module: str, name: str) -> bool | None:
    """Whether module has name at commit: a top-level binding or a submodule; None: no such module."""
    file, package = module_file(module)
    text = read(commit, file)
    if text is None:
        text = read(commit, package)
        if text is None:
            return None
        sub = module_file(f"{module}.{name}")
        if read(commit, sub[0]) is not None or read(commit, sub[1]) is not None:
            return True
    try:
        return name in defined_names(text)
    except SyntaxError:
        return None


def dependency_problems(stack: Stack, tips: Sequence[str], read: Reader) -> list[str]:
    """Each PR whose added tests use a vllm_omni name its prefix lacks and a later PR adds.

    tips[k] is the commit of PR k's prefix (the target plus PRs 1..k)."""
    problems = []
    for k, pr in enumerate(stack.prs):
        for test in own_test_files(pr):
            source = read(tips[k], test)
            if source is None:
                continue
            try:
                uses = used_names(source)
            except SyntaxError:
                continue
            for module, name in uses:
                if has_name(read, tips[k], module, name):
                    continue
                later = next(
                    (
                        stack.prs[j]
                        for j in range(k + 1, len(stack.prs))
                        if has_name(read, tips[j], module, name)
                    ),
                    None,
                )
                if later is not None:
                    problems.append(
                        f"PR {pr.name!r}: its test {test} uses {module}.{name}, which only the later "
                        f"PR {later.name!r} adds: move the test to that PR, or the code it needs "
                        "into this one"
                    )
    return problems
