"""A/B of two revisions of the series on one workload: ``nox -s e2e -- --ab BASE``.

A is BASE (a ``patches/revisions.toml`` label, a git ref of this repository, or
``pristine``), B is the current ``patches/`` (the checkout ``nox -s apply``
built). Each is applied to the same pin in its own checkout, then served and
benchmarked in ABBA order, ``--ab-repeats`` times, every trial on a fresh
server with the same workload and warm-up. The summary answers a reviewer's
checklist: revisions and series digests, pin, hardware, model, workload,
trials with their spread, the delta of the steady medians with a bootstrap
confidence interval, and whether A and B produced the same bytes and frames.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scripts import gitcmd, records, revisions
from scripts.checkout.apply import apply_series
from scripts.digests import sha256_file
from scripts.e2e import benchclient, compare, determinism, evidence, install, plot, preflight, run
from scripts.e2e.config import E2EConfig, fill_cmd, standin_server_cmd
from scripts.e2e.evidence import RunRecord
from scripts.errors import KitError
from scripts.legs import legenv
from scripts.pin import load_pin
from scripts.report import markdown_table, progress
from scripts.series import Patch, load_series, series_digest
from scripts.workspace import Workspace

RESAMPLES = 4000
STAGE_NOTE = (
    "only end-to-end was measured: the realtime route sends no per-chunk server-side stage timings "
    "(video.chunk_metadata carries none)"
)


class ABError(KitError):
    """BASE cannot be resolved or applied."""


@dataclass(frozen=True)
class Variant:
    name: str  # "A" (base) or "B" (head)
    label: str  # what the user named
    series_digest: str
    patches: int
    source: str  # where the series came from
    checkout: Path


@dataclass
class Trial:
    record: RunRecord
    variant: str
    ttfc_ms: float | None = None
    intervals_ms: list[float] = field(default_factory=list)


# ---- pure logic ------------------------------------------------------------------------------


def abba(repeats: int) -> list[str]:
    """A, B, B, A per repeat: a drift over time hits both variants alike."""
    return list("ABBA" * repeats)


def bootstrap_delta(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], confidence: float, seed: int = 0
) -> tuple[float, float, float]:
    """(median(B) - median(A), CI low, CI high) of the pooled steady intervals.

    Two-level bootstrap: trials are resampled within each variant, then intervals
    within each drawn trial, so that a trial-to-trial spread widens the interval.
    """
    rng = random.Random(seed)

    def draw(trials: Sequence[Sequence[float]]) -> float:
        picked = [rng.choice(trials) for _ in trials]
        return statistics.median([rng.choice(t) for t in picked for _ in t])

    deltas = sorted(draw(b) - draw(a) for _ in range(RESAMPLES))
    tail = (1.0 - confidence) / 2.0
    low, high = (
        deltas[int(tail * RESAMPLES)],
        deltas[min(RESAMPLES - 1, int((1.0 - tail) * RESAMPLES))],
    )
    point = statistics.median([v for t in b for v in t]) - statistics.median(
        [v for t in a for v in t]
    )
    return point, low, high


def speed_verdict(low: float, high: float) -> str:
    """B against A: the whole interval above zero is slower, below is faster."""
    if low > 0:
        return "slower"
    if high < 0:
        return "faster"
    return "no significant change"


def spread_pct(medians: Sequence[float]) -> float:
    """(max - min) / median of the per-trial medians, in percent."""
    return (max(medians) - min(medians)) / statistics.median(medians) * 100.0 if medians else 0.0


def steady_intervals(document: Mapping[str, Any], warmup_chunks: int) -> list[float]:
    return [
        float(c["inter_arrival_ms"])
        for s in document.get("sessions", [])
        for c in s.get("chunks", [])
        if int(c["index"]) >= warmup_chunks and int(c["index"]) > 0
    ]


def variant_env(env: Mapping[str, str], variant: str) -> dict[str, str]:
    """``STANDIN_<V>_X`` becomes ``STANDIN_X`` for variant V's server: per-variant stand-in knobs."""
    prefix = f"STANDIN_{variant}_"
    own = {f"STANDIN_{k[len(prefix) :]}": v for k, v in env.items() if k.startswith(prefix)}
    return {
        **{k: v for k, v in env.items() if not k.startswith(("STANDIN_A_", "STANDIN_B_"))},
        **own,
    }


# ---- resolving and applying BASE --------------------------------------------------------------


def base_series(ws: Workspace, base: str, scratch: Path) -> tuple[list[Patch], str]:
    """(patches, where they came from) for a revision label, ``pristine`` or a git ref."""
    if base == "pristine":
        return [], "the pristine pin, no patches"
    revs = {r.label: r for r in revisions.load(ws.revisions_file)}
    if base in revs:
        found = revisions.find_series(revs[base], ws.pr_dir / base / "series", ws.root, scratch)
        if found is None:
            raise ABError(
                f"revision {base}'s series is neither in .work/pr nor in this repository's history",
                "pass a git ref of the kit instead",
            )
        return found
    commit = gitcmd.verify(ws.root, f"{base}^{{commit}}")
    if commit is None:
        raise ABError(
            f"--ab {base!r} is not a revision in patches/revisions.toml, a git ref, or pristine",
            "pass e.g. --ab v1, --ab main~3 or --ab pristine",
        )
    patches = revisions.patches_at(ws.root, commit, scratch / "ref")
    if patches is None:
        raise ABError(
            f"{base} ({commit[:12]}) has no valid patches/ series", "pass a kit commit that has one"
        )
    return patches, f"kit commit {commit[:12]}"


def prepare_variants(ws: Workspace, base: str) -> tuple[Variant, Variant]:
    """A: BASE applied in .work/ab/base/vllm-omni; B: the current checkout (preflight checked it)."""
    pin = load_pin(ws.pin_file)
    with tempfile.TemporaryDirectory() as tmp:
        patches, source = base_series(ws, base, Path(tmp))
        where = ws.ab_dir / "base" / "vllm-omni"
        where.parent.mkdir(parents=True, exist_ok=True)
        apply_series(pin, patches, where, ws.downloads, force=True, progress=progress)
        # reads the files: inside
        a = Variant("A", base, series_digest(patches), len(patches), source, where)
    head = load_series(ws.patches)
    b = Variant(
        "B", "HEAD (patches/)", series_digest(head), len(head), "this working tree", ws.checkout
    )
    return a, b


# ---- running ----------------------------------------------------------------------------------


def server_command(
    ws: Workspace, config: E2EConfig, variant: Variant, base_python: str | None
) -> tuple[list[str], str]:
    """(server command, python for upstream's client) for one variant."""
    values = {
        "host": config.host,
        "port": str(config.port),
        "model": config.model_name,
        "deploy_config": str(config.deploy_config),
        "checkout": str(variant.checkout),
    }
    if config.standin:
        values["python"] = str(legenv.ensure_env(ws, "stock"))
        return fill_cmd(
            config.server_cmd or standin_server_cmd(ws.standin_script), values
        ), sys.executable
    assert base_python is not None  # preflight refused a run without one
    venv = ws.ab_dir / variant.name / "venv"
    values["python"] = str(install.install(ws, base_python, variant.checkout, venv))
    return fill_cmd(config.server_cmd or install.serve_command(venv), values), values["python"]


def run_trials(
    ws: Workspace,
    config: E2EConfig,
    folder: Path,
    variants: Mapping[str, Variant],
    base_python: str | None,
    env: Mapping[str, str],
) -> list[Trial]:
    """ABBA x repeats; stops at the first failed trial, which stays in the list and decides the
    verdict."""

    commands = {name: server_command(ws, config, v, base_python) for name, v in variants.items()}
    image = benchclient.first_frame(config, folder)
    client = benchclient.choose_client(config)
    trials: list[Trial] = []
    order = abba(config.ab_repeats)
    for index, name in enumerate(order, start=1):
        d = folder / f"run-{index}"
        server_cmd, client_python = commands[name]
        cmd = benchclient.command(
            config, client, client_python, d / "benchmark.json", d / "video.mp4", image
        )
        server_env = variant_env(env, name)
        record = run.one_run(
            config,
            index,
            folder,
            server_cmd,
            server_env,
            cmd,
            benchclient.client_env(client, server_env, ws.root),
        )
        trial = Trial(record, name)
        if record.status == "ok":
            run.judge_performance(record, d / "benchmark.json", config)
            document = json.loads((d / "benchmark.json").read_text())
            trial.intervals_ms = steady_intervals(document, config.warmup_chunks)
            trial.ttfc_ms = document["sessions"][-1].get("metrics", {}).get("ttfc_ms")
        trials.append(trial)
        print(
            f"trial {index}/{len(order)} ({name}): "
            f"{run.progress(config, record).split(': ', 1)[1]}",
            flush=True,
        )
        if record.status != "ok":
            break
    return trials


def lossless(folder: Path, trials: Sequence[Trial]) -> dict[str, Any]:
    """Every trial's video against trial 1's (an A): md5, then every decoded frame."""
    videos = [folder / f"run-{t.record.index}" / "video.mp4" for t in trials]
    results = compare.against_first(videos)
    for t, v in zip(trials, videos, strict=True):
        t.record.md5 = compare.md5_file(v)
    by_variant = {
        name: [r for t, r in zip(trials[1:], results, strict=True) if t.variant == name]
        for name in "AB"
    }
    firsts = [r.first_diff_frame for r in by_variant["B"] if r.first_diff_frame is not None]
    return {
        "a_deterministic": all(r.md5_equal and r.frames_equal for r in by_variant["A"]),
        "lossless": all(r.md5_equal and r.frames_equal for r in by_variant["B"]),
        "frames_equal": all(r.frames_equal for r in by_variant["B"]),
        "md5_equal": all(r.md5_equal for r in by_variant["B"]),
        "first_diff_frame": min(firsts, default=None),
        "differing_frames": max((r.differing_frames for r in by_variant["B"]), default=0),
        "frame_counts": compare.frame_counts(results),
    }


def lossless_text(loss: Mapping[str, Any] | None) -> str:
    if loss is None:
        return "lossless not judged"
    if loss["lossless"]:
        return "lossless: B's bytes and decoded frames equal A's"
    if loss["frames_equal"]:
        return "NOT lossless: containers differ (md5) although the decoded frames are equal"
    first, count = loss["first_diff_frame"], loss["differing_frames"]
    return f"NOT lossless: decoded frames differ from frame {first} ({count} frames)"


def summarize(
    config: E2EConfig, trials: Sequence[Trial], loss: Mapping[str, Any] | None
) -> dict[str, Any]:
    failed = next((t for t in trials if t.record.status != "ok"), None)
    rows = [
        {
            "trial": t.record.index,
            "variant": t.variant,
            "status": t.record.status,
            "error": t.record.error,
            "steady_median_ms": t.record.steady_median_ms,
            "steady_p99_ms": t.record.steady_p99_ms,
            "ttfc_ms": t.ttfc_ms,
            "md5": t.record.md5,
            "steady_intervals": len(t.intervals_ms),
        }
        for t in trials
    ]
    out: dict[str, Any] = {
        "trials": rows,
        "stage_attribution": STAGE_NOTE,
        "confidence": config.ab_confidence,
    }
    if failed is not None:
        first_line = (
            failed.record.error.splitlines()[0] if failed.record.error else failed.record.status
        )
        out["verdict"] = "trial_failed"
        out["reason"] = (
            f"trial {failed.record.index} ({failed.variant}) {failed.record.status}: {first_line}; "
            "no delta is reported from an incomplete A/B"
        )
        return out
    per = {name: [t for t in trials if t.variant == name] for name in "AB"}
    # No delta without intervals behind it: a variant with no trial, or a trial with no steady
    # chunk, is "not measured", never a verdict.
    empty = next((t for t in trials if not t.intervals_ms), None)
    missing = next((name for name, ts in per.items() if not ts), None)
    if empty is not None or missing is not None:
        out["verdict"] = "not_measured"
        out["reason"] = (
            f"variant {missing} ran no trial"
            if empty is None
            else f"trial {empty.record.index} ({empty.variant}) delivered no steady chunk "
            "(raise --chunks above --warmup-chunks)"
        ) + "; no delta is reported without steady intervals on both sides"
        return out
    delta, low, high = bootstrap_delta(
        [t.intervals_ms for t in per["A"]], [t.intervals_ms for t in per["B"]], config.ab_confidence
    )
    median_a = statistics.median([v for t in per["A"] for v in t.intervals_ms])
    verdict = speed_verdict(low, high)
    out.update(
        verdict=verdict,
        median_a_ms=median_a,
        median_b_ms=median_a + delta,
        delta_ms=delta,
        delta_pct=delta / median_a * 100.0,
        ci_ms=[low, high],
        ci_pct=[low / median_a * 100.0, high / median_a * 100.0],
        spread_pct={
            name: spread_pct([t.record.steady_median_ms or 0.0 for t in ts])
            for name, ts in per.items()
        },
        lossless=loss,
    )
    same = lossless_text(loss)
    out["reason"] = (
        f"B vs A steady median {delta:+.1f} ms ({out['delta_pct']:+.2f} %), "
        f"{config.ab_confidence:.0%} CI "
        f"[{out['ci_pct'][0]:+.2f}, {out['ci_pct'][1]:+.2f}] %: {verdict}; {same}"
    )
    return out


# ---- evidence ---------------------------------------------------------------------------------


def model_config_digest(model: str | None) -> str | None:
    """sha256 of the model's config (model_index.json or config.json), None without one."""
    for name in ("model_index.json", "config.json"):
        path = Path(model or "") / name
        if model and path.is_file():
            return f"{name} sha256 {sha256_file(path)}"
    return None


def checklist(
    ws: Workspace,
    config: E2EConfig,
    variants: Mapping[str, Variant],
    summary: Mapping[str, Any],
    hardware: str,
) -> list[tuple[str, str]]:
    """The reviewer's questions, item by item, answered from this invocation."""
    a, b = variants["A"], variants["B"]
    kit = evidence.kit_identity(ws)
    pin = load_pin(ws.pin_file)
    workload = (
        f"{config.chunks} chunks, {config.width}x{config.height} @ {config.fps} fps, seed "
        f"{config.seed}, "
        f"warm-up {config.warmup_sessions} session(s) + {config.warmup_chunks} chunks, "
        f"{config.sessions} measured session(s) per trial"
    )
    return [
        ("Base (A)", f"{a.label}: {a.patches} patches, series {a.series_digest[:16]} ({a.source})"),
        (
            "Head (B)",
            f"{b.label}: {b.patches} patches, series {b.series_digest[:16]}, kit "
            f"{kit['kit_commit']}",
        ),
        ("Pin", pin.label),
        ("Hardware", hardware),
        (
            "Model",
            f"{config.model or 'none (stand-in)'}; "
            f"{model_config_digest(config.model) or 'no config digest'}",
        ),
        ("Workload", workload),
        (
            "Repeats",
            f"ABBA x {config.ab_repeats} = {4 * config.ab_repeats} trials, each on a fresh server",
        ),
        ("Result", summary["reason"]),
        ("Stage attribution", STAGE_NOTE),
    ]


def markdown(summary: Mapping[str, Any], items: Sequence[tuple[str, str]], standin: bool) -> str:
    lines = ["## A/B Result", "", f"**Verdict: {summary['verdict']}** - {summary['reason']}", ""]
    if standin:
        lines += [f"> NOTE: {evidence.STANDIN_NOTE}. These numbers say nothing about Ascend.", ""]
    lines += [f"- **{k}**: {v}" for k, v in items]
    num = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    rows = [
        [
            t["trial"],
            t["variant"],
            t["status"],
            num(t["steady_median_ms"]),
            num(t["steady_p99_ms"]),
            num(t["ttfc_ms"]),
            t["md5"] or "-",
        ]
        for t in summary["trials"]
    ]
    headers = [
        "trial",
        "variant",
        "status",
        "steady median (ms)",
        "p99 (ms)",
        "TTFC (ms)",
        "video md5",
    ]
    lines += ["", markdown_table(headers, rows)]
    if "spread_pct" in summary:
        spread = ", ".join(f"{k} {v:.2f} %" for k, v in summary["spread_pct"].items())
        lines += ["", f"Trial spread (max-min of the trial medians over their median): {spread}."]
    return "\n".join(lines) + "\n"


def execute(
    ws: Workspace, config: E2EConfig, base_python: str | None, checks: Sequence[preflight.Check]
) -> int:
    a, b = prepare_variants(ws, str(config.ab))  # a bad BASE stops here, before any evidence folder
    folder = evidence.create(config.evidence_root)
    print(f"e2e: A/B ({config.mode}) {config.ab} vs HEAD, evidence in {folder}", flush=True)
    variants = {"A": a, "B": b}
    env = run.server_env(ws, config, os.environ)
    hardware = "stand-in (no accelerator)" if config.standin else preflight.npu_smi_info()
    evidence.write_json(
        folder / "manifest.json",
        {
            "mode": f"ab-{config.mode}",
            "config": asdict(config),
            "variants": {k: asdict(v) for k, v in variants.items()},
            "preflight": [asdict(c) for c in checks],
            "hardware": hardware,
            "kit": evidence.kit_identity(ws),
            "determinism_env": determinism.recorded(env),
        },
    )
    try:
        trials = run_trials(ws, config, folder, variants, base_python, env)
    except KeyboardInterrupt as stop:
        reason = evidence.interruption(stop, "the A/B trials")
        evidence.write_json(
            folder / "ab.json",
            {"verdict": "interrupted", "reason": reason, "evidence": str(folder)},
        )
        raise
    complete = bool(trials) and all(t.record.status == "ok" for t in trials)
    summary = summarize(config, trials, lossless(folder, trials) if complete else None)
    complete = complete and summary["verdict"] != "not_measured"
    items = checklist(
        ws,
        config,
        variants,
        summary,
        "stand-in (no accelerator)" if config.standin else "npu-smi below",
    )
    # series_digest: the head's, as in the e2e record, so that a PR body can tell a stale A/B.
    document = {
        **summary,
        "mode": config.mode,
        "stand_in": config.standin,
        "checklist": dict(items),
        "evidence": str(folder),
        "series_digest": b.series_digest,
    }
    evidence.write_json(folder / "ab.json", document)
    text = markdown(summary, items, config.standin)
    planned = plot.ab_trials(
        folder, abba(config.ab_repeats), summary["trials"], {"A": a.label, "B": b.label}
    )
    figure = plot.section(
        folder,
        f"A/B ({config.mode}): chunk intervals per trial",
        planned,
        config.band_ms,
        config.warmup_chunks,
    )
    (folder / "ab.md").write_text(
        text
        + "\n"
        + "\n".join(figure)
        + "\n"
        + ("" if config.standin else f"\n```\n{hardware}\n```\n")
    )
    records.write(config.evidence_root.parent / "records", "e2e-ab", {**document, "markdown": text})
    print(f"e2e: A/B {summary['verdict'].upper()}: {summary['reason']}", flush=True)
    print(f"e2e: evidence {folder}", flush=True)
    return 0 if complete else 1
