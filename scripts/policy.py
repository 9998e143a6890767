"""The repository's text rules, a lint step rather than unit tests: citations resolve inside the
repository, the README's generated tables are current, and every workflow pins its actions by commit
and bounds its jobs.

`python -m scripts policy` prints one line per finding and exits 1 when there is any.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from scripts.readme import expected_blocks, stale
from scripts.workspace import Workspace

# The kit's docs and modules as comments cite them (paths under docs and scripts); tests/ and the
# rest also name upstream's paths (tests/diffusion/...), so they are left out.
OWN_PATH = re.compile(r"(?<![\w/.-])((?:scripts|docs)/[\w./-]*\w)")
# Notes that lived beside the repository while it was written, never in it.
OUTSIDE = ("UPSTREAM" + ".md", "DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")
CITING = (".md", ".py", ".yml", ".toml", ".txt")
PINNED_ACTION = re.compile(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}")
# Folders git and the tools make (.gitignore; the kit's own is the workspace's); caches say so
# themselves.
MADE = (".git", ".nox", ".venv", "__pycache__", ".benchmarks")
# Files that cite missing paths on purpose: the bite tests of these rules.
EXAMPLES = ("tests/kit/test_standalone.py",)


def dangling(text: str, root: Path) -> list[str]:
    """Citations in text of files outside the repository, or of repository paths that do not exist."""
    outside = [name for name in OUTSIDE if name in text]
    return outside + [path for path in OWN_PATH.findall(text) if not (root / path).exists()]


def citation_findings(root: Path, names: Iterable[str]) -> list[str]:
    """One line per file that cites something the repository does not hold."""
    texts = [n for n in names if (n.endswith(CITING) or n == ".ci/run") and n not in EXAMPLES]
    found = {n: dangling((root / n).read_text(encoding="utf-8"), root) for n in texts}
    return [
        f"{name}: cites {', '.join(cited)} (not in the repository)"
        for name, cited in found.items()
        if cited
    ]


def readme_findings(readme: str, expected: dict[str, str]) -> list[str]:
    return [
        f"README.md: table {name} out of date -- paste the output of `python -m scripts readme`"
        for name in stale(readme, expected)
    ]


def workflow_findings(name: str, text: str) -> list[str]:
    """Actions pinned by a full commit, and a timeout-minutes for every job."""
    uses = re.findall(r"uses:\s*(\S+)", text)
    found = [
        f"{name}: action {u} is not pinned by a 40-hex commit"
        for u in uses
        if not PINNED_ACTION.fullmatch(u)
    ]
    jobs = re.findall(r"^  (\w[\w-]*):\n    name:", text, flags=re.M)
    if text.count("timeout-minutes:") != len(jobs):
        found.append(
            f"{name}: {len(jobs)} job(s), {text.count('timeout-minutes:')} timeout-minutes"
        )
    return found


def made_folder(folder: Path) -> bool:
    """A folder the kit, git or a tool made: named in MADE, tagged a cache, or ignoring all of itself."""
    ignore = folder / ".gitignore"
    ignores_all = ignore.is_file() and "*" in ignore.read_text(encoding="utf-8").splitlines()
    return folder.name in MADE or (folder / "CACHEDIR.TAG").is_file() or ignores_all


def repository_files(root: Path, work: Path) -> list[str]:
    """The repository's files, relative: what the kit makes (.work, .nox, .venv) and caches left out."""
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if Path(folder) / d != work and not made_folder(Path(folder) / d)
        )
        names += [str((Path(folder) / f).relative_to(root)) for f in sorted(files) if f != ".git"]
    return names


def findings(ws: Workspace) -> list[str]:
    """Every rule over the repository's files."""
    names = repository_files(ws.root, ws.work)
    readme = (ws.root / "README.md").read_text(encoding="utf-8")
    workflows = sorted((ws.root / ".github" / "workflows").glob("*.yml"))
    return [
        *citation_findings(ws.root, names),
        *readme_findings(readme, expected_blocks(ws.patches)),
        *(f for w in workflows for f in workflow_findings(w.name, w.read_text(encoding="utf-8"))),
    ]
