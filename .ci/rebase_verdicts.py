"""Compare a rebase report's per-patch verdicts with the expected ones (.ci/run's rebase step).

    python3 .ci/rebase_verdicts.py REPORT.json EXPECTED.toml REBASE_EXIT_CODE

Exit 0 when every patch has its expected verdict and the rebase's exit code agrees with them (1 when
a patch conflicts, else 0); 1 with one line per difference; 2 with one line when an input cannot be
read. Patches are matched by Kit-Patch slug: the report names the file NNNN-<slug>.patch.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import tomllib

PATCH_FILE = re.compile(r"^\d{4}-(?P<slug>.+)\.patch$")


def fail(what: str, fix: str) -> int:
    print(f"ci: error: {what} -- {fix}", file=sys.stderr)
    return 2


def found_verdicts(report: dict[str, object]) -> dict[str, str]:
    """Slug -> outcome from a rebase report's "patches" list."""
    found = {}
    for entry in report["patches"]:  # type: ignore[attr-defined]
        match = PATCH_FILE.match(entry["name"])
        found[match["slug"] if match else entry["name"]] = entry["outcome"]
    return found


def differences(found: dict[str, str], expected: dict[str, str], exit_code: int) -> list[str]:
    lines = [
        f"{slug}: {found.get(slug, 'not in the report')}, expected {want}"
        for slug, want in expected.items()
        if found.get(slug) != want
    ]
    lines += [
        f"{slug}: {got}, and no expected verdict"
        for slug, got in found.items()
        if slug not in expected
    ]
    conflicts = "conflict" in found.values()
    if exit_code != int(conflicts):
        lines.append(
            f"rebase exited {exit_code}, with {'a' if conflicts else 'no'} conflict in its report"
        )
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        return fail(
            f"usage: {Path(__file__).name} REPORT.json EXPECTED.toml EXIT_CODE", "see .ci/run"
        )
    report_path, expected_path, exit_code = Path(argv[0]), Path(argv[1]), int(argv[2])
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        found = found_verdicts(report)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return fail(
            f"cannot read the rebase report {report_path} ({exc})", "run nox -s rebase first"
        )
    try:
        expected_doc = tomllib.loads(expected_path.read_text(encoding="utf-8"))
        expected = dict(expected_doc["verdicts"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return fail(f"cannot read {expected_path} ({exc})", "restore it from git")
    lines = differences(found, expected, exit_code)
    for line in lines:
        print(f"ci: rebase {expected_doc.get('target', '?')}: {line}")
    if not lines:
        counts = {v: list(found.values()).count(v) for v in dict.fromkeys(found.values())}
        print(f"ci: rebase {expected_doc.get('target', '?')}: the expected verdicts ({counts})")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
