"""diffparse counts what git counts, including added/removed lines that look like file headers."""

from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts.diffparse import git_names, hunks, parse, unquoted
from scripts.gitcmd import git

# Removes lines `-- x`/`-- y`/`- ` and adds `++ x`/`++ y`/`+ `: in the diff they read `--- x`, `+++
# x` and `-- `, like file headers and format-patch's signature, which a parser without hunk lengths
# skips (0/0).
HEADERS = "diff --git a/notes.txt b/notes.txt\n--- a/notes.txt\n+++ b/notes.txt\n"
HUNK_1 = "@@ -1,5 +1,5 @@\n start\n--- x\n--- y\n-- \n+++ x\n+++ y\n++ \n end\n"
HEADER_LOOKALIKES = HEADERS + HUNK_1 + "@@ -9 +9,2 @@\n nine\n+ten\n"


def test_a_short_hunk_does_not_swallow_the_next_file_a_no_newline_marker_stays_and_names_are_read() -> (
    None
):
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
    assert (moved.path, moved.old_path, moved.apply_name, moved.new_file) == (
        "new.py",
        "old.py",
        "old.py",
        False,
    )
    assert (new.path, new.old_path, new.apply_name, new.new_file) == ("n.py", "", "n.py", True)
    (hunk,) = moved.hunks
    assert hunk.text == renamed and (hunk.removed, hunk.added) == (("x",), ("y",))
    assert new.hunks[0].text == created


def test_lookalike_lines_in_a_hunk_count_as_git_counts_and_hunks_carry_headers_start_lines(
    tmp_path: Path,
) -> None:
    (diff,) = parse(HEADER_LOOKALIKES)
    assert (diff.path, diff.removed, diff.added) == (
        "notes.txt",
        3,
        ((2, "++ x"), (3, "++ y"), (4, "+ "), (10, "ten")),
    )
    patch = tmp_path / "change.patch"
    # format-patch's signature
    patch.write_text(HEADER_LOOKALIKES + "-- \n2.47.0\n", encoding="utf-8")
    assert (
        counts(patch.read_text(encoding="utf-8"))
        == numstat(patch, tmp_path)
        == [(4, 3, "notes.txt")]
    )
    first, second = hunks(HEADER_LOOKALIKES)
    assert (first.path, first.number, first.old_start) == ("notes.txt", 1, 1)
    # not file headers
    assert first.removed == ("-- x", "-- y", "- ") and first.added == ("++ x", "++ y", "+ ")
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
    parts = hunks(
        worktree_diff(
            tmp_path, "a.txt", "".join(lines), "".join(lines[:2] + lines[3:25] + lines[26:])
        )
    )
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


@pytest.mark.parametrize(
    "patch", sorted((KIT_ROOT / "patches").glob("*.patch")), ids=lambda p: p.stem
)
def test_counts_match_git_on_the_series(patch: Path, tmp_path: Path) -> None:
    assert counts(patch.read_text(encoding="utf-8")) == numstat(patch, tmp_path)


@pytest.mark.parametrize(
    ("rest", "names"),
    [
        ('"a/\\303\\274.py" "b/\\303\\274.py"', ("ü.py", "ü.py")),
        ("a/x b/c.py b/x b/c.py", ("x b/c.py", "x b/c.py")),
        ('"a/q\\"t.py" "b/q\\"t.py"', ('q"t.py', 'q"t.py')),
        ("a/x.py b/y.py", ("x.py", "y.py")),
        ('a/x.py "b/\\303\\274.py"', ("x.py", "ü.py")),
        ('"a/tab\\there" "b/tab\\there"', ("tab\there", "tab\there")),
    ],
)
def test_git_names_reads_quoted_and_spaced_names(rest: str, names: tuple[str, str]) -> None:
    assert git_names(rest) == names


def test_parse_reads_quoted_names_and_ends_lines_at_newlines_only() -> None:
    """A quoted name is its file (bytes that are not UTF-8 kept); a form feed or U+2028 inside a line,
    and a CRLF file's CR, do not end a line: counts and hunks stay right."""
    assert unquoted('"b/caf\\351.py"')[0] == "b/caf\udce9.py"
    text = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n "
        "a\x0cb\n+c\u2028d\n+e\r\n f\n"
        "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-g\n+h\n"
        'diff --git "a/vllm_omni/\\303\\274.py" "b/vllm_omni/\\303\\274.py"\nnew file mode 100644\n'
        '--- /dev/null\n+++ "b/vllm_omni/\\303\\274.py"\n@@ -0,0 +1 @@\n+u = 1\n'
    )
    x, y, u = parse(text)
    assert x.added == ((2, "c\u2028d"), (3, "e")) and "+e\r\n" in x.hunks[0].text
    assert (y.path, y.added, y.removed) == ("y.py", ((1, "h"),), 1)
    assert (u.path, u.new_file, u.added) == ("vllm_omni/ü.py", True, ((1, "u = 1"),))
