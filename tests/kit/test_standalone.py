"""The repository stands alone: the citation rule of `python -m scripts policy` bites."""

from __future__ import annotations

from conftest import KIT_ROOT

from scripts.policy import OUTSIDE, citation_findings, dangling


def test_a_citation_outside_the_repository_or_of_a_missing_path_is_a_finding(tmp_path) -> None:
    text = "see " + OUTSIDE[0] + " and docs/e2e-runbook.md, but docs/results.md and `scripts/checks/lint.py` exist"
    assert dangling(text, KIT_ROOT) == [OUTSIDE[0], "docs/e2e-runbook.md"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("see docs/b.md and docs/a.md\n", encoding="utf-8")
    (tmp_path / "notes.bin").write_text("docs/b.md\n", encoding="utf-8")  # not a text file the rule reads
    found = citation_findings(tmp_path, ["docs/a.md", "notes.bin"])
    assert found == ["docs/a.md: cites docs/b.md (not in the repository)"]
