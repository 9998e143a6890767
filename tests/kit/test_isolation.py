"""The guard that keeps tests out of the developer's .work (conftest.developers_work_untouched) bites."""

from __future__ import annotations

from pathlib import Path

from conftest import work_snapshot


def test_a_write_under_work_changes_the_snapshot_and_the_shared_parts_do_not(tmp_path: Path) -> None:
    work = tmp_path / ".work"
    (work / "records").mkdir(parents=True)
    (work / "envs" / "stock").mkdir(parents=True)
    (work / "records" / "e2e.json").write_text("{}", encoding="utf-8")
    before = work_snapshot(work)
    (work / "envs" / "stock" / "built").write_text("a cache", encoding="utf-8")  # shared: not the developer's work
    (work / "records" / "kit").mkdir()
    (work / "records" / "kit" / "junit.xml").write_text("<x/>", encoding="utf-8")  # these tests' own report
    assert work_snapshot(work) == before
    (work / "records" / "e2e.json").write_text('{"overwritten": true}', encoding="utf-8")
    (work / "evidence").mkdir()
    (work / "evidence" / "summary.md").write_text("new", encoding="utf-8")
    after = work_snapshot(work)
    assert set(after) - set(before) == {"evidence/summary.md"}
    assert after["records/e2e.json"] != before["records/e2e.json"]
    assert work_snapshot(tmp_path / "none") == {}
