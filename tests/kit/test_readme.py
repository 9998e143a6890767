"""The README's series and rule tables are the ones made from patches/ and rules.RULES."""

from __future__ import annotations

from conftest import KIT_ROOT

from scripts.policy import readme_findings
from scripts.readme import current_block, expected_blocks, stale
from scripts.report import markdown_table
from scripts.series import header_trailers, load_series, strip_kit_trailers

README = (KIT_ROOT / "README.md").read_text(encoding="utf-8")
EXPECTED = expected_blocks(KIT_ROOT / "patches")
# (table, text in it, an edit by hand the check must catch)
EDITS = [
    ("series", "| +4/-0 |", "| +5/-0 |"),
    ("series", "8 files", "7 files"),
    ("rules", "`KIT006`", "`KIT007`"),
    ("rules", 'write t.device.type == "npu"', "write t.is_npu"),
]


def test_a_readme_table_edited_by_hand_or_without_its_markers_is_a_policy_finding() -> None:
    # the README as it is is `python -m scripts policy`'s to judge (a lint step of .ci/run)
    for name, old, new in EDITS:
        block = current_block(README, name)
        assert block is not None and old in block
        assert stale(README.replace(block, block.replace(old, new, 1)), EXPECTED) == [name]
    assert readme_findings(README.replace("<!-- end table rules -->", ""), EXPECTED) == [
        "README.md: table rules out of date -- paste the output of `python -m scripts readme`"
    ]


def test_every_markdown_table_of_the_kit_goes_through_the_one_that_keeps_a_bar_inside_its_cell() -> (
    None
):
    assert (
        markdown_table(["#", "what"], [(1, "a|b"), (2, "")])
        == "| # | what |\n|---|---|\n| 1 | a\\|b |\n| 2 |  |"
    )
    own = [
        str(p.relative_to(KIT_ROOT))
        for p in sorted((KIT_ROOT / "scripts").rglob("*.py"))
        if p.name != "report.py" and "---|" in p.read_text(encoding="utf-8")
    ]
    assert own == [], (
        f"{own} write a Markdown table of their own: use scripts.report.markdown_table"
    )


def test_the_series_table_shows_each_patchs_pr_and_the_held_ones_with_why() -> None:
    """The stack (patches/stack.toml) decides what is sent; a patch's status comes from evidence,
    never from a stored commit whose branch is unknown."""
    block = current_block(README, "series")
    assert block is not None and "| PR | upstream? |" in block
    assert "| 1: `rope-2d-cos-sin` |" in block
    assert "| held |" in block and "Held, in no PR: `0009-npu-usp4-eager-config`: " in block


def test_the_series_is_pending_and_its_upstream_evidence_is_a_kit_trailer() -> None:
    # One rule for every patch: Pending until upstream's own history shows the change; what a stored
    # upstream tree shows is an Upstream-Evidence: trailer, stripped from what goes upstream.
    patches = load_series(KIT_ROOT / "patches")
    assert [p.upstream_status for p in patches] == ["Pending"] * len(patches)
    evidence = {p.slug: header_trailers(p.text, "Upstream-Evidence") for p in patches}
    assert {slug for slug, found in evidence.items() if found} == {
        "paged-attention-npu",
        "lingbot-npu-paged-replay",
        "npu-empty-stage-buffers",
        "npu-usp4-eager-config",
    }
    assert all(
        "/992e0728e4a2ae3e68c8d60650eb3f50da20b450/" in found[0]
        and "merge-base --is-ancestor" in found[0]
        for found in evidence.values()
        if found
    )
    assert all("Upstream-Evidence:" not in strip_kit_trailers(p.text) for p in patches)
    block = current_block(README, "series")
    assert block is not None and "Backport" not in block and "already upstream" not in block
