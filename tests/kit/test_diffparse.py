"""diffparse counts what git counts, including added/removed lines that look like file headers."""

from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts.diffparse import hunks, parse
from scripts.gitcmd import git

# Removes lines `-- x`/`-- y`/`- ` and adds `++ x`/`++ y`/`+ `: in the diff they read `--- x`, `+++ x` and `-- `,
# like file headers and format-patch's signature, which a parser without hunk lengths skips (0/0).
HEADERS = "diff --git a/notes.txt b/notes.txt\n--- a/notes.txt\n+++ b/notes.txt\n"
HUNK_1 = "@@ -1,5 +1,5 @@\n start\n--- x\n--- y\n-- \n+++ x\n+++ y\n++ \n end\n"
HEADER_LOOKALIKES = HEADERS + HUNK_1 + "@@ -9 +9,2 @@\n nine\n+ten\n"


def test_a_short_hunk_does_not_swallow_the_next_file_a_no_newline_marker_stays_and_names_are_read() -> None:
    truncated = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,5 +1,6 @@\n x\n+y\n"
    second = "diff --git a/b.py b/b.py\n--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-old\n+new\n"
    got = [(d.path, d.added, d.removed) for d in parse(truncated + second)]
    assert got == [("a.py", ((2, "y"),), 0), ("b.py", ((1, "new"),), 1)]
    renamed = (
        "diff --git a/old.py b/new.py\nsimilarity index 90%\nrename from old.py\nrename to new.py\n"
        "--- a/old.py\n+++ b/new.py\n@@ -3 +3 @@\n-x\n\\ No newline at end of file\n+y\n"
        "\\ No newline at end of file\n"
    )
    created = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+z\n"
    moved, new = parse(renamed + created + "-- \n2.47.0\n")
    assert (moved.path, moved.old_path, moved.apply_name, moved.new_file) == ("new.py", "old.py", "old.py", False)
    assert (new.path, new.old_path, new.apply_name, new.new_file) == ("n.py", "", "n.py", True)
    (hunk,) = moved.hunks
    assert hunk.text == renamed and (hunk.removed, hunk.added) == (("x",), ("y",))
    assert new.hunks[0].text == created


def test_lookalike_lines_in_a_hunk_count_as_git_counts_and_hunks_carry_headers_start_lines(tmp_path: Path) -> None:
    (diff,) = parse(HEADER_LOOKALIKES)
    assert (diff.path, diff.removed, diff.added) == ("notes.txt", 3, ((2, "++ x"), (3, "++ y"), (4, "+ "), (10, "ten")))
    patch = tmp_path / "change.patch"
    patch.write_text(HEADER_LOOKALIKES + "-- \n2.47.0\n", encoding="utf-8")  # format-patch's signature
    assert counts(patch.read_text(encoding="utf-8")) == numstat(patch, tmp_path) == [(4, 3, "notes.txt")]
    first, second = hunks(HEADER_LOOKALIKES)
    assert (first.path, first.number, first.old_start) == ("notes.txt", 1, 1)
    assert first.removed == ("-- x", "-- y", "- ") and first.added == ("++ x", "++ y", "+ ")  # not file headers
    assert first.text == HEADERS + HUNK_1
    assert (second.number, second.old_start, second.added) == (2, 9, ("ten",))
    assert second.label == "notes.txt hunk #2 (@@ -9)"
    assert second.text == HEADERS + "@@ -9 +9,2 @@\n nine\n+ten\n"


def worktree_diff(root: Path, name: str, before: str, after: str) -> str:
    git("init", "-q", cwd=root)
    (root / name).write_text(before, encoding="utf-8")
    git("add", "-A", cwd=root)
    (root / name).write_text(after, encoding="utf-8")
    return git("diff", cwd=root)


def test_each_hunk_of_a_real_diff_applies_alone(tmp_path: Path) -> None:
    lines = [f"{n}\n" for n in range(30)]
    parts = hunks(worktree_diff(tmp_path, "a.txt", "".join(lines), "".join(lines[:2] + lines[3:25] + lines[26:])))
    git("checkout", "--", "a.txt", cwd=tmp_path)
    assert [h.old_start for h in parts] == [1, 23]
    for h in parts:
        (tmp_path / "one.patch").write_text(h.text, encoding="utf-8")
        git("apply", "--check", "one.patch", cwd=tmp_path)


def numstat(patch: Path, cwd: Path) -> list[tuple[int, int, str]]:
    rows = git("apply", "--numstat", str(patch), cwd=cwd).splitlines()
    return [(int(a), int(r), name) for a, r, name in (row.split("\t") for row in rows)]


def counts(patch_text: str) -> list[tuple[int, int, str]]:
    return [(len(d.added), d.removed, d.path) for d in parse(patch_text)]


@pytest.mark.parametrize("patch", sorted((KIT_ROOT / "patches").glob("*.patch")), ids=lambda p: p.stem)
def test_counts_match_git_on_the_series(patch: Path, tmp_path: Path) -> None:
    assert counts(patch.read_text(encoding="utf-8")) == numstat(patch, tmp_path)
