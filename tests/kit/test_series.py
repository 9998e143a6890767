"""series.subject reads the Subject: of the kit's own format-patch export back as it was written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import commit_patch

from scripts.errors import KitError
from scripts.gitcmd import FORMAT_PATCH, git
from scripts.series import load_series, squashed_slugs, strip_kit_trailers, subject, trailer_values

SUBJECTS = (
    # encoded and folded
    "[NPU] Déjà vu: run the fused attention on Ascend for the paged KV cache (ü, 昇腾)",
    "[Bugfix] A plain ASCII subject long enough that git folds it over two header lines",
)


@pytest.mark.parametrize("text", SUBJECTS)
def test_subject_round_trips_through_format_patch(tmp_path: Path, text: str) -> None:
    git("init", "-q", cwd=tmp_path)
    commit_patch(tmp_path, {"a.txt": "a\n"}, text, "a")
    patch = git(*FORMAT_PATCH, "--root", "HEAD", cwd=tmp_path)
    assert "\n " in patch.split("\n\n", 1)[0]  # the header is folded, so unfolding is exercised too
    assert subject(patch) == text


def test_every_kit_trailer_is_stripped_for_upstream() -> None:
    message = (
        "Fix it\n\nBody.\n\nUpstream-Status: Pending\n"
        "Kit-Off-NPU: vllm_omni/diffusion/layers/rope.py::RotaryEmbeddingWan.forward_native: the "
        "fix itself\n"
        "Kit-Patch: rope\n"
        "Signed-off-by: A <a@b>\n"
    )
    assert strip_kit_trailers(message) == "Fix it\n\nBody.\n\nSigned-off-by: A <a@b>\n"


SQUASH = (
    "A\n\nWhy a.\n\nUpstream-Status: Pending\nKit-Patch: a\n\n"
    "B\n\nWhy b.\n\nUpstream-Status: Pending\nKit-Patch: b\n"
)


@pytest.mark.parametrize(
    ("message", "slugs"),
    [
        ("S\n\nbody\nKit-Patch: x\nmore\n\nUpstream-Status: Pending\nKit-Patch: real\n", ["real"]),
        ("S\n\nKit-Patch: x\n\nUpstream-Status: Pending\nKit-Patch: real\n", ["real"]),
        (SQUASH, ["a", "b"]),
        ("S\n\nUpstream-Status: Pending\nKit-Patch: x\n\nA closing remark.\n", ["x"]),
    ],
)
def test_only_trailer_blocks_hold_trailers(message: str, slugs: list[str]) -> None:
    assert squashed_slugs(message) == slugs


def test_a_body_line_like_a_trailer_stays_in_the_upstream_message() -> None:
    message = "S\n\nbody\nKit-Patch: x\n\nUpstream-Status: Pending\nKit-Patch: real\n"
    assert strip_kit_trailers(message) == "S\n\nbody\nKit-Patch: x\n\n"
    cherry = "S\n\nWhy.\n\nUpstream-Status: Pending\nKit-Patch: real\n(cherry picked from commit 0123abcd)\n"
    # git's line too
    assert trailer_values(message, "Kit-Patch") == trailer_values(cherry, "Kit-Patch") == ["real"]


def patch_text(slug: str, subject: str = "[NPU] A change") -> str:
    """A format-patch file as refresh writes one (the parts load_series reads)."""
    return (
        f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\nSubject: {subject}\n\n"
        f"Why.\n\nUpstream-Status: Pending\nKit-Patch: {slug}\n---\n"
        f"diff --git a/{slug}.py b/{slug}.py\nnew file mode 100644\n--- /dev/null\n+++ b/{slug}.py\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
    )


def good_series(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, slug in (("0001-one.patch", "one"), ("0002-two.patch", "two")):
        (folder / name).write_text(patch_text(slug), encoding="utf-8")
    (folder / "series").write_text(
        "# the series\n0001-one.patch\n0002-two.patch\n", encoding="utf-8"
    )
    return folder


def series_edit(text: str) -> Callable[[Path], None]:
    return lambda folder: (folder / "series").write_text(text, encoding="utf-8")


def series_bytes(data: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / "series").write_bytes(data)


def linked(folder: Path) -> None:
    (folder / "0002-two.patch").rename(folder.parent / "elsewhere.patch")
    (folder / "0002-two.patch").symlink_to(folder.parent / "elsewhere.patch")


def two_with_one_slug(folder: Path) -> None:
    (folder / "0002-two.patch").write_text(patch_text("one"), encoding="utf-8")


def long_slug(folder: Path) -> None:
    slug = "a" * 61
    (folder / "0002-two.patch").write_text(patch_text(slug), encoding="utf-8")


# (what is wrong, the edit of a good patches/, what the one line says): patches/series as a schema
# of entries: each a plain patch file name of patches/, listed once, every .patch file listed, each
# named NNNN-<slug>.patch by its place and slug
SERIES_FAULTS = [
    ("missing-file", lambda f: (f / "series").unlink(), "series not found in patches/"),
    ("missing-patch", lambda f: (f / "0002-two.patch").unlink(), "which is not in patches/"),
    ("type-two-names-on-a-line", series_edit("0001-one.patch 0002-two.patch\n"), "not a plain"),
    ("type-a-folder", series_edit("sub/0001-one.patch\n0002-two.patch\n"), "not a plain"),
    ("type-not-a-patch", series_edit("0001-one.patch\n0002-two.diff\n"), "not a plain"),
    ("type-a-link", linked, "is a symbolic link"),
    ("type-bom", series_bytes(b"\xef\xbb\xbf0001-one.patch\n0002-two.patch\n"), "byte order mark"),
    ("type-not-utf8", series_bytes(b"# \xff\n0001-one.patch\n0002-two.patch\n"), "not valid UTF-8"),
    (
        "duplicate-entry",
        series_edit("0001-one.patch\n0002-two.patch\n0001-one.patch\n"),
        "more than once",
    ),
    ("duplicate-slug", two_with_one_slug, "two patches share Kit-Patch: one"),
    ("extra-patch-file", series_edit("0001-one.patch\n"), "0002-two.patch is not in the series"),
    ("range-outside", series_edit("../0001-one.patch\n0002-two.patch\n"), "not a plain"),
    ("range-absolute", series_edit("/tmp/0001-one.patch\n0002-two.patch\n"), "not a plain"),
    ("range-order", series_edit("0002-two.patch\n0001-one.patch\n"), "so its name is 0001-two"),
    ("range-slug-too-long", long_slug, "over 60"),
]


@pytest.mark.parametrize(
    ("edit", "needle"), [f[1:] for f in SERIES_FAULTS], ids=[f[0] for f in SERIES_FAULTS]
)
def test_series_file_against_its_schema(
    tmp_path: Path, edit: Callable[[Path], None], needle: str
) -> None:
    """Each fault is one KitError naming what is wrong and the fix, never a traceback; the good
    series it was made from loads."""
    folder = good_series(tmp_path / "patches")
    assert [p.slug for p in load_series(folder)] == ["one", "two"]
    edit(folder)
    with pytest.raises(KitError) as caught:
        load_series(folder)
    assert needle in str(caught.value) and " -- " in str(caught.value), str(caught.value)
