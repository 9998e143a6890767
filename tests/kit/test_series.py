"""series.subject reads the Subject: of the kit's own format-patch export back as it was written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import commit_patch

from scripts.gitcmd import FORMAT_PATCH, git
from scripts.series import squashed_slugs, strip_kit_trailers, subject, trailer_values

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
    assert (
        trailer_values(message, "Kit-Patch") == trailer_values(cherry, "Kit-Patch") == ["real"]
    )  # git's line too
