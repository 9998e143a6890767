"""Pure rules of the checkout: which hunk git failed on, which files are generated (not the user's
edits)."""

import pytest

from scripts.checkout.apply import failed_hunk
from scripts.checkout.foreign import is_generated


def test_failed_hunk_counts_a_renamed_files_hunks_and_is_none_where_git_names_no_failure() -> None:
    assert failed_hunk("Checking patch a.py...\n", "") is None
    patch = (
        "diff --git a/old.py b/new.py\nrename from old.py\nrename to new.py\n--- a/old.py\n+++ "
        "b/new.py\n"
        "@@ -1 +1 @@\n--- a\n+b\n@@ -7 +7 @@\n-c\n+d\n"
    )
    # git names a renamed file by its old name; `--- a` is a removed line, not a file header
    assert failed_hunk("error: patch failed: old.py:7\n", patch) == ("old.py", "hunk #2 (@@ -7)")
    assert failed_hunk("error: patch failed: old.py:4\n", patch) == ("old.py", "hunk at line 4")


@pytest.mark.parametrize(
    ("path", "generated"),
    [(p, True) for p in ("a/__pycache__/x.pyc", "a/x.pyc", ".coverage.1")]
    + [(p, False) for p in ("a/x.py", "a/pycache.py")],
)
def test_is_generated(path: str, generated: bool) -> None:
    assert is_generated(path) is generated
