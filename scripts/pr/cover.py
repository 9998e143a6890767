"""The series cover (b4's cover letter): patches/cover.md, kept and versioned with the patches.

Format (plain Markdown, edited by hand; refresh never rewrites it):

    <the PR title, one line, with upstream's prefixes: [Bugfix][NPU] ...>

    <the purpose: one or more paragraphs saying what fails, what the change
    does and how it was validated>

    ## Notes for reviewers

    <known limitations, follow-ups: anything a reviewer should know>

`nox -s pr` makes the PR title from the first line and the Purpose section
from the paragraphs, followed by one line per commit, then the notes. Each
revision in patches/revisions.toml records the cover's digest, and the cover
is compared between revisions next to the range-diff of the patches.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts import handfile
from scripts.digests import sha256_text
from scripts.errors import KitError

NAME = "cover.md"
NOTES = "## Notes for reviewers"
TITLE_MAX = 72
PREFIX = re.compile(r"^\[[^\]\s][^\]]*\]")  # [Bugfix], [NPU], [Hardware][Ascend]


class CoverError(KitError):
    """The series cover is missing or malformed."""


@dataclass(frozen=True)
class Cover:
    title: str
    purpose: str
    notes: str
    digest: str
    source: str  # the file's text as written


def parse(text: str) -> Cover:
    lines = text.strip("\n").splitlines()
    title = lines[0].strip() if lines else ""
    if not title or title.startswith("#"):
        raise CoverError(
            f"patches/{NAME} does not start with the PR title",
            "make its first line the title, e.g. [Bugfix][NPU] Fix ... (format: "
            "scripts/pr/cover.py)",
        )
    if len(title) > TITLE_MAX:
        raise CoverError(
            f"patches/{NAME}'s title is {len(title)} characters, over the {TITLE_MAX} a "
            "commit-style title keeps",
            "shorten it: one or two of upstream's prefixes ([NPU], [Bugfix], [Hardware][Ascend]) "
            "and what changes",
        )
    if len(lines) > 1 and lines[1].strip():
        # A title is a paragraph of its own: a first line followed by text is the purpose's first
        # line (the title line is missing), never a title cut mid-sentence.
        raise CoverError(
            f"patches/{NAME} has no title line: its first paragraph runs on past line 1 "
            f"({title[:40]!r}...)",
            "put the PR title on line 1, then a blank line, then the purpose, e.g. "
            "[Bugfix][NPU] Fix ... (format: scripts/pr/cover.py)",
        )
    if not PREFIX.match(title):
        raise CoverError(
            f"patches/{NAME}'s first line {title[:40]!r} is no PR title: it has no upstream prefix",
            "start it with upstream's prefixes, e.g. [NPU] or [Bugfix] (format: scripts/pr/cover.py)",
        )
    rest = "\n".join(lines[1:])
    heading = re.search(rf"^{re.escape(NOTES)}[ \t]*$", rest, re.M)
    purpose, notes = (rest[: heading.start()], rest[heading.end() :]) if heading else (rest, "")
    if not purpose.strip():
        raise CoverError(
            f"patches/{NAME} has no purpose paragraph after the title",
            "write what fails, what the series changes and how it was validated",
        )
    return Cover(title, purpose.strip(), notes.strip(), sha256_text(text), text)


def load(patches_dir: Path) -> Cover:
    path = patches_dir / NAME
    if not path.is_file():
        raise CoverError(
            f"patches/{NAME} (the series cover: PR title, purpose, notes) is missing",
            "write it: first line the title, then the purpose, then '## Notes for reviewers'",
        )
    return parse(handfile.read(path, f"patches/{NAME}"))


def purpose_section(cover: Cover, subjects: Sequence[str], other_devices: str) -> str:
    """The PR's Purpose: the cover's paragraphs, what changes on other devices (the off-NPU proof's
    words, never the cover's), one line per commit, then the notes for reviewers."""
    commits = "\n".join(f"- {s}" for s in subjects)
    notes = f"\n\n### Notes for reviewers\n\n{cover.notes}" if cover.notes else ""
    return f"{cover.purpose}\n\n{other_devices}\n\nCommits:\n\n{commits}{notes}"


def compare(old: str | None, new: str, old_label: str) -> str:
    """The cover's change since the previous revision, as a unified diff (or why there is none)."""
    if old is None:
        return f"Cover against {old_label}: not available (not in the snapshot nor in the kit's git history)."
    if old == new:
        return f"Cover against {old_label}: unchanged."
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        f"{old_label}/{NAME}",
        f"new/{NAME}",
    )
    return f"Cover against {old_label}:\n\n{''.join(diff).rstrip()}"
