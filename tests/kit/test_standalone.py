"""The repository stands alone: the citation rule of `python -m scripts policy` bites."""

from __future__ import annotations

from conftest import KIT_ROOT

from scripts.policy import OUTSIDE, citation_findings, dangling, repository_files


def test_a_citation_outside_the_repository_or_of_a_missing_path_is_a_finding(tmp_path) -> None:
    text = (
        "see "
        + OUTSIDE[0]
        + " and docs/e2e-runbook.md, but docs/results.md and `scripts/checks/lint.py` exist"
    )
    assert dangling(text, KIT_ROOT) == [OUTSIDE[0], "docs/e2e-runbook.md"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("see docs/b.md and docs/a.md\n", encoding="utf-8")
    # not a text file the rule reads
    (tmp_path / "notes.bin").write_text("docs/b.md\n", encoding="utf-8")
    found = citation_findings(tmp_path, ["docs/a.md", "notes.bin"])
    assert found == ["docs/a.md: cites docs/b.md (not in the repository)"]


def test_the_rule_reads_the_repository_s_files_not_what_the_kit_or_tools_made(tmp_path) -> None:
    for name in (
        "docs/a.md",
        ".github/workflows/x.yml",
        ".work/vllm-omni/b.md",
        ".cache/c.md",
        ".ruff_cache/d",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n", encoding="utf-8")
    (tmp_path / ".cache" / ".gitignore").write_text("# made by a tool\n*\n", encoding="utf-8")
    (tmp_path / ".ruff_cache" / "CACHEDIR.TAG").write_text("", encoding="utf-8")
    assert repository_files(tmp_path, tmp_path / ".work") == [
        ".github/workflows/x.yml",
        "docs/a.md",
    ]
