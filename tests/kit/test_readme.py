"""The README's series and rule tables are the ones made from patches/ and lint.RULES."""

from __future__ import annotations

import pytest
from conftest import KIT_ROOT

from scripts.readme import current_block, expected_blocks, stale

README = (KIT_ROOT / "README.md").read_text(encoding="utf-8")
EXPECTED = expected_blocks(KIT_ROOT / "patches")


def test_readme_tables_are_up_to_date() -> None:
    out_of_date = stale(README, EXPECTED)
    assert not out_of_date, (
        f"README.md: table(s) {', '.join(out_of_date)} out of date -- paste the output of "
        "`python -m scripts readme`:\n\n" + "\n\n".join(EXPECTED[name] for name in out_of_date)
    )


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("series", "| +4/-0 |", "| +5/-0 |"),  # a figure typed by hand
        ("series", "5 files", "4 files"),
        ("rules", "`KIT006`", "`KIT007`"),
        ("rules", 'write t.device.type == "npu"', "write t.is_npu"),
    ],
)
def test_an_edited_table_is_caught(name: str, old: str, new: str) -> None:
    block = current_block(README, name)
    assert block is not None and old in block
    assert stale(README.replace(block, block.replace(old, new, 1)), EXPECTED) == [name]


def test_a_table_without_its_markers_is_caught() -> None:
    assert stale(README.replace("<!-- end table rules -->", ""), EXPECTED) == ["rules"]
