"""The A/B (``e2e --ab BASE``): statistics on made-up intervals, then two stand-in runs (marked e2e;
each trial starts a server): one ABBA whose B is slower and changes a frame, one whose B crashes
(STANDIN_B_* knobs)."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port
from e2e_prereq import PARSING, ensure_checkout_and_stock_env

from scripts.e2e import ab
from scripts.e2e.config import parse_args
from scripts.e2e.evidence import RunRecord
from scripts.workspace import Workspace

pytest.importorskip("av", reason="frames are decoded with PyAV (ci/kit-dev-tools.txt)")

LOSSLESS = {
    "a_deterministic": True,
    "lossless": True,
    "frames_equal": True,
    "md5_equal": True,
    "first_diff_frame": None,
    "differing_frames": 0,
    "frame_counts": [45, 45, 45, 45],
}
FRAME_30 = {
    **LOSSLESS,
    "lossless": False,
    "frames_equal": False,
    "md5_equal": False,
    "first_diff_frame": 30,
    "differing_frames": 16,
}


def noisy_trials(
    median_ms: float, seed: int, trials: int = 2, intervals: int = 14
) -> list[list[float]]:
    """Intervals with +-2 % jitter and a rare 2x spike, as a busy host produces them."""
    rng = random.Random(seed)
    return [
        [
            median_ms * (2.0 if rng.random() < 0.05 else 1.0 + rng.uniform(-0.02, 0.02))
            for _ in range(intervals)
        ]
        for _ in range(trials)
    ]


def test_bootstrap_detects_a_faster_b_not_a_wide_spread() -> None:
    # slower and no change: the summaries below (the same bootstrap on the same intervals)
    _, low, high = ab.bootstrap_delta(
        noisy_trials(315.0, seed=3), noisy_trials(300.0, seed=1), 0.95
    )
    assert ab.speed_verdict(low, high) == "faster"
    # Two B trials far apart: the same pooled median, but the interval widens with the spread and
    # reaches zero.
    base = noisy_trials(300.0, seed=5)
    tight = ab.bootstrap_delta(base, noisy_trials(315.0, seed=6), 0.95)
    far_apart = [noisy_trials(285.0, seed=7, trials=1)[0], noisy_trials(345.0, seed=8, trials=1)[0]]
    split = ab.bootstrap_delta(base, far_apart, 0.95)
    assert split[2] - split[1] > 2 * (tight[2] - tight[1])
    assert ab.speed_verdict(split[1], split[2]) == "no significant change"


def test_abba_order_and_per_variant_knobs() -> None:
    assert ab.abba(2) == list("ABBAABBA")
    env = {
        "STANDIN_CHUNK_INTERVAL_MS": "300",
        "STANDIN_B_LATENCY_SCALE": "1.05",
        "STANDIN_A_FAULT": "error",
    }
    assert ab.variant_env(env, "B") == {
        "STANDIN_CHUNK_INTERVAL_MS": "300",
        "STANDIN_LATENCY_SCALE": "1.05",
    }
    assert ab.variant_env(env, "A") == {
        "STANDIN_CHUNK_INTERVAL_MS": "300",
        "STANDIN_FAULT": "error",
    }
    assert ab.spread_pct([100.0, 101.0, 99.0]) == pytest.approx(2.0)


def trials(a: list[list[float]], b: list[list[float]], failed: str = "") -> list[ab.Trial]:
    """ABBA trials with these intervals (A's and B's in order); ``failed``: the status of the first B
    trial."""
    out, left = [], {"A": list(a), "B": list(b)}
    for index, name in enumerate(ab.abba(len(a) // 2), start=1):
        status = failed if failed and name == "B" else "ok"
        intervals = left[name].pop(0)
        record = RunRecord(
            index,
            status,
            error=f"{status}: it exited" if status != "ok" else "",
            steady_median_ms=statistics.median(intervals),
        )
        out.append(ab.Trial(record, name, intervals_ms=intervals if status == "ok" else []))
        if status != "ok":
            break
    return out


def summarize(*args: Any) -> dict[str, Any]:
    return ab.summarize(parse_args(PARSING, ["--standin", "--ab", "pristine"], {}), *args)


def test_summary_of_a_five_percent_slower_b_with_the_same_bytes() -> None:
    doc = summarize(trials(noisy_trials(300.0, seed=1), noisy_trials(315.0, seed=2)), LOSSLESS)
    assert doc["verdict"] == "slower", doc["reason"]
    assert doc["ci_pct"][0] > 0 and doc["delta_ms"] == pytest.approx(15.0, abs=5.0)
    # slower, but the same bytes: the two verdicts are apart
    assert doc["lossless"]["lossless"] is True
    assert [t["variant"] for t in doc["trials"]] == list("ABBA")
    assert doc["median_b_ms"] == pytest.approx(doc["median_a_ms"] + doc["delta_ms"])
    assert (
        doc["stage_attribution"] == ab.STAGE_NOTE
        and "only end-to-end was measured" in ab.STAGE_NOTE
    )
    assert "lossless: B's bytes and decoded frames equal A's" in doc["reason"]


def test_summary_of_one_frame_difference_at_unchanged_speed() -> None:
    doc = summarize(trials(noisy_trials(300.0, seed=1), noisy_trials(300.0, seed=4)), FRAME_30)
    # 0 % on known data (the host is not)
    assert doc["verdict"] == "no significant change", doc["reason"]
    assert doc["ci_pct"][0] < 0 < doc["ci_pct"][1]
    assert "NOT lossless: decoded frames differ from frame 30 (16 frames)" in doc["reason"]
    assert ab.lossless_text({**FRAME_30, "frames_equal": True}) == (
        "NOT lossless: containers differ (md5) although the decoded frames are equal"
    )
    assert ab.lossless_text(None) == "lossless not judged"


def assert_crashed_b(doc: dict[str, Any]) -> None:
    """A crashed B trial ends the A/B: reported, with no delta and no lossless judgement."""
    assert doc["verdict"] == "trial_failed"
    assert [(t["variant"], t["status"]) for t in doc["trials"]] == [
        ("A", "ok"),
        ("B", "server_died"),
    ]
    assert "trial 2 (B) server_died" in doc["reason"] and "no delta" in doc["reason"]
    assert "delta_ms" not in doc and "lossless" not in doc


def test_summary_of_a_crashed_b_trial_reports_no_delta() -> None:
    doc = summarize(
        trials(noisy_trials(300.0, seed=1), noisy_trials(300.0, seed=2), "server_died"), None
    )
    assert_crashed_b(doc)
    assert "trial 2 (B) server_died: server_died: it exited" in doc["reason"]


def run_ab(
    kit: Workspace, tmp_path: Path, interval_ms: int = 300, **knobs: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    ensure_checkout_and_stock_env(kit)
    root = tmp_path / "evidence"
    run = (
        f"--standin --ab pristine --ab-repeats 1 --port {free_port()} --chunks 16 --warmup-chunks 2"
    )
    small = "--warmup-sessions 0 --width 64 --height 48"
    waits = "--health-timeout-s 300 --bench-timeout-s 120 --stop-timeout-s 5"
    cmd = [sys.executable, "-m", "scripts", "e2e", *f"{run} {small} {waits}".split()]
    cmd += ["--evidence-root", str(root), "--lock-dir", str(tmp_path / "locks")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "KIT_E2E_"))}
    env |= {
        "STANDIN_CHUNK_INTERVAL_MS": str(interval_ms),
        **{f"STANDIN_B_{k.upper()}": v for k, v in knobs.items()},
    }
    done = subprocess.run(cmd, cwd=kit.root, env=env, capture_output=True, text=True, timeout=900)
    (folder,) = root.iterdir()
    md = (folder / "ab.md").read_text()
    assert md.startswith("## A/B Result") and "stand-in" in md
    return done, json.loads((folder / "ab.json").read_text())


@pytest.mark.e2e
def test_standin_abba_detects_a_slower_b_and_its_changed_frame(
    e2e_kit: Workspace, tmp_path: Path
) -> None:
    done, doc = run_ab(e2e_kit, tmp_path, latency_scale="1.05", alter_frame="30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [t["variant"] for t in doc["trials"]] == list("ABBA")
    assert doc["verdict"] == "slower", doc["reason"]
    assert doc["ci_pct"][0] > 0 and 2.0 < doc["delta_pct"] < 8.0
    loss = doc["lossless"]
    # One generated frame changed; H.264 predicts later frames from it, so they decode differently
    # too. Every frame before it is equal: the pristine and the patched handler, at different
    # speeds, give the same bytes.
    assert (
        loss["lossless"] is False
        and loss["first_diff_frame"] == 30
        and loss["differing_frames"] >= 1
    )
    assert loss["a_deterministic"] is True
    assert "NOT lossless: decoded frames differ from frame 30 (" in doc["reason"]
    assert doc["checklist"]["Base (A)"].startswith("pristine: 0 patches")
    assert "only end-to-end was measured" in doc["checklist"]["Stage attribution"]


@pytest.mark.e2e
def test_standin_crashed_b_trial_is_reported_not_averaged_away(
    e2e_kit: Workspace, tmp_path: Path
) -> None:
    # No statistics here (the crash ends the A/B): chunks ten times as fast as the ABBA case's, 4.5
    # s less asleep.
    done, doc = run_ab(
        e2e_kit, tmp_path, interval_ms=30, fault="die-mid-session", fault_after_chunks="3"
    )
    assert done.returncode == 1
    assert_crashed_b(doc)


def test_a_trial_without_a_steady_interval_is_not_measured_never_a_verdict() -> None:
    """No delta without the intervals behind it: a trial that delivered no steady chunk (fewer chunks
    than asked) makes the A/B not_measured, where the bootstrap would have drawn from nothing."""
    done = trials(noisy_trials(300.0, seed=1), noisy_trials(300.0, seed=2))
    done[2].intervals_ms = []  # the second trial of B
    doc = summarize(done, LOSSLESS)
    assert doc["verdict"] == "not_measured" and "delta_ms" not in doc and "lossless" not in doc
    assert "trial 3 (B) delivered no steady chunk" in doc["reason"]
    for trial in done:
        trial.intervals_ms = []
    assert summarize(done, None)["verdict"] == "not_measured"
