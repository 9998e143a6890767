""".ci/run's rebase step: the per-patch verdicts of `nox -s rebase -- 0.28.0` against the expected ones
(.ci/rebase-0.28.0.toml, keyed by Kit-Patch slug), compared by .ci/rebase_verdicts.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import KIT_ROOT

from scripts.series import load_series
from scripts.workspace import Workspace

SCRIPT = KIT_ROOT / ".ci" / "rebase_verdicts.py"
EXPECTED = KIT_ROOT / ".ci" / "rebase-0.28.0.toml"
VERDICTS = tomllib.loads(EXPECTED.read_text(encoding="utf-8"))["verdicts"]


def report(path: Path, verdicts: dict[str, str], order: list[str] | None = None) -> Path:
    """A rebase report in scripts/rebase/trial.py's shape (the fields the step reads)."""
    slugs = order or list(verdicts)
    patches = [
        {"name": f"{i:04d}-{slug}.patch", "outcome": verdicts[slug], "detail": "", "hunks": []}
        for i, slug in enumerate(slugs, 1)
    ]
    path.write_text(json.dumps({"to": "vllm-omni 0.28.0 (wheel)", "patches": patches}))
    return path


def compare(
    report_path: Path, exit_code: int, expected: Path = EXPECTED
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(report_path), str(expected), str(exit_code)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_expectation_names_every_patch_of_the_series_by_slug() -> None:
    slugs = [p.slug for p in load_series(Workspace(KIT_ROOT).patches)]
    assert sorted(VERDICTS) == sorted(slugs)
    # today: 5 clean, 2 offset, 2 conflict (0003 and 0007, on 0.28.0's paged_attention.py)
    assert sorted(VERDICTS.values()) == ["clean"] * 5 + ["conflict"] * 2 + ["offset"] * 2
    assert VERDICTS["paged-attention-npu"] == VERDICTS["npu-empty-stage-buffers"] == "conflict"


def test_the_expected_verdicts_pass_in_any_order(tmp_path: Path) -> None:
    done = compare(report(tmp_path / "r.json", VERDICTS), 1)
    assert done.returncode == 0 and "the expected verdicts" in done.stdout, (
        done.stdout + done.stderr
    )
    # another engineer renumbers and reorders the series: the slugs still match
    reordered = report(tmp_path / "r.json", VERDICTS, order=list(reversed(VERDICTS)))
    assert compare(reordered, 1).returncode == 0


@pytest.mark.parametrize(
    ("change", "exit_code", "line"),
    [
        ({"paged-attention-npu": "clean"}, 1, "paged-attention-npu: clean, expected conflict"),
        ({"rope-2d-cos-sin": "clean"}, 1, "rope-2d-cos-sin: clean, expected offset"),
        (
            {"paged-attention-npu-test": "upstream-verbatim"},
            1,
            "paged-attention-npu-test: upstream-verbatim, expected clean",
        ),
        ({}, 0, "rebase exited 0, with a conflict in its report"),
        (
            {"paged-attention-npu-test": None},
            1,
            "paged-attention-npu-test: not in the report, expected clean",
        ),
        ({"new-patch": "clean"}, 1, "new-patch: clean, and no expected verdict"),
    ],
    ids=[
        "conflict-became-clean",
        "offset-became-clean",
        "dropped",
        "exit-code",
        "missing",
        "extra",
    ],
)
def test_a_wrong_verdict_fails_the_step(
    tmp_path: Path, change: dict[str, str | None], exit_code: int, line: str
) -> None:
    verdicts = {**VERDICTS, **change}
    verdicts = {k: v for k, v in verdicts.items() if v is not None}
    done = compare(report(tmp_path / "r.json", verdicts), exit_code)
    assert done.returncode == 1 and f"ci: rebase 0.28.0: {line}\n" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("report_text", "needle"),
    [
        (None, "cannot read the rebase report"),
        ("{}", "cannot read the rebase report"),
        ("[1", "cannot read"),
    ],
    ids=["absent", "no-patches", "not-json"],
)
def test_an_unreadable_report_is_one_line(
    tmp_path: Path, report_text: str | None, needle: str
) -> None:
    path = tmp_path / "r.json"
    if report_text is not None:
        path.write_text(report_text)
    done = compare(path, 1)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and needle in done.stderr


def ci_step(
    tmp_path: Path, rebase_report: dict[str, str], rebase_exit: int
) -> subprocess.CompletedProcess[str]:
    """.ci/run's rebase_verdicts function as written, in a copy of the kit, with `nox` a shell function
    standing in for the rebase run (minutes and the registry): it writes the report a run writes and
    exits as that run would."""
    body = re.search(
        r"^rebase_verdicts\(\) \{.*?^\}\n", (KIT_ROOT / ".ci/run").read_text(), re.S | re.M
    )
    assert body, "no rebase_verdicts step in .ci/run"
    (tmp_path / ".ci").mkdir(parents=True)
    for name in ("rebase_verdicts.py", "rebase-0.28.0.toml"):
        (tmp_path / ".ci" / name).write_bytes((KIT_ROOT / ".ci" / name).read_bytes())
    prepared = report(tmp_path / "prepared.json", rebase_report)
    script = (
        f'nox() {{ mkdir -p .work/rebase && cp "{prepared}" .work/rebase/0.28.0.json; return {rebase_exit}; }}\n'
        f"{body[0]}rebase_verdicts\n"
    )
    return subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )


def test_the_ci_step_passes_the_expected_verdicts_and_fails_a_wrong_one(tmp_path: Path) -> None:
    assert ci_step(tmp_path / "ok", VERDICTS, 1).returncode == 0
    done = ci_step(tmp_path / "wrong", {**VERDICTS, "npu-empty-stage-buffers": "3-way"}, 1)
    assert (
        done.returncode == 1 and "npu-empty-stage-buffers: 3-way, expected conflict" in done.stdout
    )
    # the old step: any exit 0 or 1 with a report passed, the wrong verdict too
    assert (
        ci_step(tmp_path / "old", {**VERDICTS, "npu-empty-stage-buffers": "3-way"}, 2).returncode
        == 1
    )
