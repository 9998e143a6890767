"""The README's series and rule tables are the ones made from patches/ and rules.RULES."""

from __future__ import annotations

from conftest import KIT_ROOT

from scripts.policy import readme_findings
from scripts.readme import current_block, expected_blocks, stale
from scripts.report import markdown_table
from scripts.series import load_series

README = (KIT_ROOT / "README.md").read_text(encoding="utf-8")
EXPECTED = expected_blocks(KIT_ROOT / "patches")
# (table, text in it, an edit by hand the check must catch)
EDITS = [
    ("series", "| +4/-0 |", "| +5/-0 |"),
    ("series", "7 files", "6 files"),
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


def test_a_backport_patch_shows_as_already_upstream_and_out_of_the_prs_scope() -> None:
    patches = {p.name: p for p in load_series(KIT_ROOT / "patches")}
    config = patches["0006-npu-usp4-eager-config.patch"]
    assert config.already_upstream and config.upstream_status.startswith(
        "Backport [https://github.com/"
    )
    assert not any(p.already_upstream for name, p in patches.items() if name != config.name)
    block = current_block(README, "series")
    assert block is not None and "| Backport (already upstream) |" in block
    assert (
        "The PR carries 6 files" in block
        and "`0006-npu-usp4-eager-config` is already upstream" in block
    )
