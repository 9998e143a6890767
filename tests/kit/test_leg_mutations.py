"""Each CPU test leg bites: one added line of one patch broken in a copy of the kit (sharing this
checkout's leg envs) makes `test <leg> -k ...` fail, naming the test that catches it in the leg's
junit record. Minutes each.

Only faults `nox -s mutate` cannot make are here: a guard written with `Tensor.is_npu` (an attribute
stock torch lacks) and per-sequence instead of cumulative KV lengths (no operator drops a call).
"""

from pathlib import Path

import pytest
from conftest import Kit
from kithelpers import (
    MUTATIONS,
    Mutation,
    assert_control_passed,
    failed_tests,
    leg_kit,
    shared_env_ready,
)

pytestmark = pytest.mark.legs


def mutate(patch_text: str, old: str, new: str) -> str:
    lines = patch_text.splitlines(keepends=True)
    hits = [
        i
        for i, line in enumerate(lines)
        if line.startswith("+") and not line.startswith("+++") and old in line
    ]
    assert len(hits) == 1, f"{old!r} must be in exactly one added line, found {len(hits)}"
    lines[hits[0]] = lines[hits[0]].replace(old, new)
    return "".join(lines)


def run_leg(kit: Kit, leg: str, select: str) -> tuple[int, str]:
    shared_env_ready(kit, leg)
    kit.run("apply", check=True)
    proc = kit.run("test", leg, "-k", select)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_broken_series_fails_its_leg(mutation: Mutation, tmp_path: Path) -> None:
    kit = leg_kit(tmp_path / "kit")
    # the stock leg's control is test_loop.py's first run (the full suite, a leg_kit copy)
    if mutation.leg == "npu":
        rc, output = run_leg(kit, mutation.leg, mutation.select)
        assert rc == 0, output[-3000:]
        assert_control_passed(kit, mutation.leg)
    patch = kit.patches / mutation.patch
    patch.write_text(
        mutate(patch.read_text(encoding="utf-8"), mutation.old, mutation.new), encoding="utf-8"
    )
    rc, output = run_leg(kit, mutation.leg, mutation.select)
    assert rc != 0, f"leg {mutation.leg} passed with {mutation.name}:\n{output[-3000:]}"
    failed = failed_tests(kit, mutation.leg)
    assert any(mutation.caught_by in name for name in failed), (failed, output[-3000:])
    assert mutation.caught_by in output  # pytest's summary names it too
