"""The one checked reader of the kit's state files (scripts/records.py): records, a test leg's green
map, a mutate record. Each tampered entry is refused by name in one line; what the kit writes reads
back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import records
from scripts.legs.legrun import read_green
from scripts.mutation import mutate

OUTCOME = {
    "key": "k",
    "path": "vllm_omni/attn.py",
    "line": 3,
    "operator": "not",
    "description": "d",
    "status": "killed",
    "legs": ["npu"],
    "killed_by": "test_x",
    "seconds": 1.5,
}
GREEN = {
    "context": {"pin": "p"},
    "patches": {"0001-a.patch": "0" * 64},
    "files": {"0001-a.patch": ["vllm_omni/attn.py"]},
    "coverage": {"vllm_omni/attn.py": ["tests/regression/test_attn.py"]},
}


def test_a_record_reads_back_and_one_of_another_name_or_shape_is_refused(tmp_path: Path) -> None:
    records.write(tmp_path, "lint", {"passed": True})
    assert records.read(tmp_path, "lint")["passed"] is True  # type: ignore[index]
    assert records.read(tmp_path, "absent") is None
    (tmp_path / "test.json").write_text(json.dumps({"name": "lint", "finished_at": "x"}))
    with pytest.raises(records.RecordError, match="the record of 'lint', not of 'test'"):
        records.read(tmp_path, "test")
    (tmp_path / "test.json").write_text("[1, 2]")
    with pytest.raises(records.RecordError, match="holds a JSON list"):
        records.read(tmp_path, "test")
    (tmp_path / "test.json").write_text('{"name": "test"')
    with pytest.raises(records.RecordError, match="is unreadable"):
        records.read(tmp_path, "test")


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"coverage": {"x.py": ["/tmp/evil_test.py"]}},
            'is "/tmp/evil_test.py", not a module of the suite',
        ),
        ({"coverage": {"x.py": ["tests/regression/../../x.py"]}}, "not a module of the suite"),
        ({"patches": {"../x.patch": "0" * 64}}, 'entry "../x.patch" is not a file of patches/'),
        ({"patches": []}, "patches is [], not an object"),
        ({"files": {"0001-a.patch": "x.py"}}, 'is "x.py", not a list'),
        ({"context": None}, "context is null"),
        ({"more": 1}, "unexpected keys ['more']"),
    ],
)
def test_a_green_map_selects_only_the_suites_modules(
    tmp_path: Path, change: dict[str, object], needle: str
) -> None:
    """A module the map names becomes a pytest target: a tampered one is refused, never run."""
    path = tmp_path / "green.json"
    path.write_text(json.dumps(GREEN))
    assert read_green(path, ".work/records/test-stock/green.json") == GREEN
    path.write_text(json.dumps({**GREEN, **change}))
    with pytest.raises(records.RecordError) as caught:
        read_green(path, ".work/records/test-stock/green.json")
    assert str(caught.value).startswith(".work/records/test-stock/green.json") and needle in str(
        caught.value
    ), str(caught.value)


@pytest.mark.parametrize(
    "outcome",
    [{"key": 1}, {**OUTCOME, "line": "3"}, {**OUTCOME, "legs": "npu"}, {**OUTCOME, "extra": 1}],
    ids=["fields", "line-a-string", "legs-a-string", "extra-field"],
)
def test_a_mutate_record_is_checked_before_its_kills_are_kept(
    tmp_path: Path, outcome: dict[str, object]
) -> None:
    record = {"scope": "npu-branch", "series_digest": "d", "outcomes": [OUTCOME]}
    records.write(tmp_path, "mutate-series", record)
    read = records.read(tmp_path, "mutate-series", mutate.RECORD_SCHEMA, mutate.RECORD_OPTIONAL)
    assert list(mutate.kills_to_keep(read, "d")) == ["k"]
    records.write(tmp_path, "mutate-series", {**record, "outcomes": [outcome]})
    with pytest.raises(records.RecordError, match="mutate-series.json: outcomes entry"):
        records.read(tmp_path, "mutate-series", mutate.RECORD_SCHEMA, mutate.RECORD_OPTIONAL)
