"""The drift-watch workflow (.github/workflows/drift-watch.yml) passes actionlint and zizmor, and those checks bite
on a broken copy."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import KIT_ROOT
from test_workflows import actionlint, zizmor

DRIFT = KIT_ROOT / ".github" / "workflows" / "drift-watch.yml"
CACHE_PIN = "actions/cache/restore@5a3ec84eff668545956fd18022155c47e93e2684"


def test_drift_watch_is_clean(tmp_path: Path) -> None:
    for done in (zizmor(DRIFT), actionlint(DRIFT)):
        assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "drift-watch.yml"  # each check bites on a copy broken its way
    bad.write_text(DRIFT.read_text().replace(CACHE_PIN, "actions/cache/restore@v4"))
    done = zizmor(bad)
    assert done.returncode != 0 and "unpinned-uses" in done.stdout
    bad.write_text(DRIFT.read_text().replace("timeout-minutes: 30", "timeout-minutes: thirty"))
    assert actionlint(bad).returncode != 0


def test_drift_watch_is_weekly_read_only_and_pinned() -> None:
    text = DRIFT.read_text()
    triggers = text.split("\non:\n", 1)[1].split("\npermissions:", 1)[0]
    assert re.findall(r"^  (\w+):", triggers, flags=re.M) == ["schedule", "workflow_dispatch"]
    assert "\npermissions:\n  contents: read\n" in text and "git push" not in text
    uses = re.findall(r"uses:\s*(\S+)", text)
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", u) for u in uses), uses
    assert "--git https://github.com/vllm-project/vllm-omni main" in text and "args: latest" in text
    assert "--baseline" in text and "upload-artifact" in text and "timeout-minutes:" in text
