"""diffparse counts what git counts, including added/removed lines that look like file headers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts.diffparse import parse
from scripts.gitcmd import git

# Removes two lines `-- x`/`-- y` and adds two lines `++ x`/`++ y`: in the diff they read
# `--- x` and `+++ x`, like file headers, which a parser without hunk lengths skips (0/0).
HEADER_LOOKALIKES = (
    "diff --git a/notes.txt b/notes.txt\n"
    "--- a/notes.txt\n"
    "+++ b/notes.txt\n"
    "@@ -1,4 +1,4 @@\n"
    " start\n"
    "--- x\n"
    "--- y\n"
    "+++ x\n"
    "+++ y\n"
    " end\n"
    "@@ -9 +9,2 @@\n"
    " nine\n"
    "+ten\n"
)


def test_header_lookalike_lines_inside_a_hunk_are_counted() -> None:
    (diff,) = parse(HEADER_LOOKALIKES)
    assert diff.path == "notes.txt"
    assert diff.removed == 2
    assert diff.added == ((2, "++ x"), (3, "++ y"), (10, "ten"))


def test_a_hunk_shorter_than_its_header_does_not_swallow_the_next_file() -> None:
    truncated = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,5 +1,6 @@\n x\n+y\n"
    second = "diff --git a/b.py b/b.py\n--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-old\n+new\n"
    assert [(d.path, d.added, d.removed) for d in parse(truncated + second)] == [
        ("a.py", ((2, "y"),), 0),
        ("b.py", ((1, "new"),), 1),
    ]


def numstat(patch: Path, cwd: Path) -> list[tuple[int, int, str]]:
    rows = git("apply", "--numstat", str(patch), cwd=cwd).splitlines()
    return [(int(a), int(r), name) for a, r, name in (row.split("\t") for row in rows)]


def counts(patch_text: str) -> list[tuple[int, int, str]]:
    return [(len(d.added), d.removed, d.path) for d in parse(patch_text)]


def test_counts_match_git_on_a_real_diff_with_lookalike_lines(tmp_path: Path) -> None:
    git("init", "-q", cwd=tmp_path)
    (tmp_path / "notes.txt").write_text("start\n-- x\n-- y\n- \nend\n", encoding="utf-8")
    git("add", "-A", cwd=tmp_path)
    (tmp_path / "notes.txt").write_text("start\n++ x\n++ y\n+ \nend\n", encoding="utf-8")
    patch = tmp_path / "change.patch"
    patch.write_text(git("diff", cwd=tmp_path) + "-- \n2.47.0\n", encoding="utf-8")  # format-patch's signature
    assert counts(patch.read_text(encoding="utf-8")) == numstat(patch, tmp_path) == [(3, 3, "notes.txt")]


@pytest.mark.parametrize("patch", sorted((KIT_ROOT / "patches").glob("*.patch")), ids=lambda p: p.stem)
def test_counts_match_git_on_the_series(patch: Path, tmp_path: Path) -> None:
    assert counts(patch.read_text(encoding="utf-8")) == numstat(patch, tmp_path)
