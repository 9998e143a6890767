"""Entry point of the e2e: preflight, lock, install, N independent server+benchmark runs, verdict.

Exit codes: 0 pass; 1 a verdict other than pass (see summary.json); 2 a
one-line KitError (an option, preflight, lock, install) before any verdict;
130 a signal (summary.json: interrupted, by which, during which run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts import records, report, signals
from scripts.e2e import (
    benchclient,
    compare,
    determinism,
    evidence,
    install,
    metrics,
    preflight,
    server,
)
from scripts.e2e.config import E2EConfig, fill_cmd, standin_server_cmd
from scripts.e2e.evidence import RunRecord
from scripts.errors import KitError
from scripts.legs import legenv
from scripts.series import load_series
from scripts.series import series_digest as digest_of
from scripts.workspace import Workspace

PORT_RELEASE_S = 10.0
CARD_RELEASE_S = 60.0


def _rel(folder: Path, path: Path) -> str:
    return str(path.relative_to(folder))


def _cards_busy(cards: Sequence[int]) -> dict[int, list[int]]:
    return preflight.busy_cards(preflight.npu_smi_info(), cards)


def _wait(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def cleanup_problems(config: E2EConfig, survivors: Sequence[int]) -> list[str]:
    """What is still held after the server was stopped: processes, the port, cards."""
    problems = [f"server processes survived SIGKILL: {list(survivors)}"] if survivors else []
    if not _wait(lambda: server.port_free(config.host, config.port), PORT_RELEASE_S):
        problems.append(f"port {config.port} still in use after the server stopped")
    if config.mode == "ascend" and not _wait(lambda: not _cards_busy(config.cards), CARD_RELEASE_S):
        problems.append(f"cards still in use after the server stopped: {_cards_busy(config.cards)}")
    return problems


def _bench_failure(
    outcome: benchclient.BenchOutcome, srv: server.Server | None, timeout_s: float
) -> tuple[str, str]:
    if outcome.timed_out:
        return "benchmark_timeout", f"benchmark still running after {timeout_s:g} s: killed"
    code = None if srv is None else srv.proc.poll()
    if code is not None:
        return "server_died", f"server exited with code {code} during the benchmark"
    if "Server rejected the session" in outcome.last_error:
        return "server_error", outcome.last_error
    return (
        "benchmark_failed",
        outcome.last_error or f"benchmark exited with code {outcome.returncode}",
    )


def one_run(
    config: E2EConfig,
    index: int,
    folder: Path,
    server_cmd: list[str],
    env: Mapping[str, str],
    bench_cmd: list[str],
    bench_env: Mapping[str, str],
) -> RunRecord:
    """Start a server, wait for health, benchmark, stop the group, check the port and cards are free."""
    record = RunRecord(index)
    d = evidence.run_dir(folder, index)
    if not config.starts_server:
        return external_run(config, record, folder, bench_cmd, bench_env)
    srv: server.Server | None = None
    try:
        # a signal lands after srv is known, inside this try: its finally stops it
        with signals.held():
            srv = server.start(server_cmd, env, d / "server.log")
        record.server_pgid = srv.pgid
        record.server_up_s = server.wait_healthy(srv, config.health_url, config.health_timeout_s)
        outcome = benchclient.run(bench_cmd, bench_env, d / "benchmark.log", config.bench_timeout_s)
        if outcome.returncode == 0:
            record.status = "ok"
        else:
            record.status, record.error = _bench_failure(outcome, srv, config.bench_timeout_s)
    except server.ServerDiedError as died:
        record.status, record.error = (
            "server_died",
            f"server exited with code {died.returncode} before healthy",
        )
    except server.ServerUnhealthyError as slow:
        record.status, record.error = "server_unhealthy", str(slow)
    finally:
        problems = (
            [] if srv is None else cleanup_problems(config, server.stop(srv, config.stop_timeout_s))
        )
    if problems:
        record.error = "; ".join(filter(None, [record.error, *problems]))
        record.status = "cleanup_failed" if record.status == "ok" else record.status
    if record.status in ("server_died", "server_unhealthy"):
        record.error += "\n--- server log tail ---\n" + server.log_tail(d / "server.log")
    record.files = {p.name: _rel(folder, p) for p in sorted(d.iterdir())}
    return record


def external_run(
    config: E2EConfig,
    record: RunRecord,
    folder: Path,
    bench_cmd: list[str],
    bench_env: Mapping[str, str],
) -> RunRecord:
    """A benchmark against a server started elsewhere: health, then the client; nothing to start or
    stop."""
    d = evidence.run_dir(folder, record.index)
    try:
        record.server_up_s = server.wait_healthy(None, config.health_url, config.health_timeout_s)
    except server.ServerUnhealthyError as slow:
        record.status, record.error = "server_unhealthy", str(slow)
    else:
        outcome = benchclient.run(bench_cmd, bench_env, d / "benchmark.log", config.bench_timeout_s)
        if outcome.returncode == 0:
            record.status = "ok"
        else:
            record.status, record.error = _bench_failure(outcome, None, config.bench_timeout_s)
    record.files = {p.name: _rel(folder, p) for p in sorted(d.iterdir())}
    return record


def judge_performance(record: RunRecord, json_path: Path, config: E2EConfig) -> None:
    steady = metrics.steady_from_benchmark(json.loads(json_path.read_text()), config.warmup_chunks)
    record.steady_count, record.steady_median_ms = steady.count, steady.median_ms
    record.steady_p99_ms, record.steady_mean_ms = steady.p99_ms, steady.mean_ms
    record.steady_rtf, record.session_rtf = steady.rtf, steady.session_rtf
    lo, hi = config.band_ms
    record.in_band = None if steady.median_ms is None else lo <= steady.median_ms <= hi


def judge_determinism(folder: Path, runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Every run's video against run 1's."""
    videos = [folder / f"run-{r.index}" / "video.mp4" for r in runs]
    results = compare.against_first(videos)
    for r, v in zip(runs, videos, strict=True):
        r.md5 = compare.md5_file(v)
        r.files["frames.sha256"] = _rel(folder, v.with_name("frames.sha256"))
    firsts = [c.first_diff_frame for c in results if c.first_diff_frame is not None]
    worst = max((c.worst for c in results if c.worst), key=lambda w: w.max_abs_diff, default=None)
    return {
        "md5_equal": all(c.md5_equal for c in results),
        "frames_equal": all(c.frames_equal for c in results),
        "frame_counts": compare.frame_counts(results),
        "first_diff_frame": min(firsts, default=None),
        "differing_frames": max((c.differing_frames for c in results), default=0),
        "max_abs_diff": None if worst is None else worst.max_abs_diff,
        "psnr_db": None if worst is None else round(worst.psnr_db, 2),
        "detail_note": f"max abs diff and PSNR over the first {compare.DETAILED_DIFFS} differing frames of each pair",
    }


def verdict(
    runs: Sequence[RunRecord], det: Mapping[str, Any] | None, config: E2EConfig
) -> tuple[str, str]:
    """The one word a reader needs first, and why."""
    failed = next((r for r in runs if r.status != "ok"), None)
    if failed is not None:
        return (
            failed.status,
            f"run {failed.index}: "
            f"{failed.error.splitlines()[0] if failed.error else failed.status}",
        )
    if det is not None and not (det["md5_equal"] and det["frames_equal"]):
        if det["frames_equal"]:
            return (
                "nondeterministic",
                "video containers differ (md5) although the decoded frames are identical",
            )
        return "nondeterministic", (
            f"decoded frames differ from frame {det['first_diff_frame']} on: "
            f"{det['differing_frames']} frames, "
            f"max abs diff {det['max_abs_diff']}, PSNR {det['psnr_db']} dB"
        )
    lo, hi = config.band_ms
    for r in runs:
        if r.in_band is None:
            return (
                "out_of_band",
                f"run {r.index}: no steady-state chunk (raise --chunks above --warmup-chunks)",
            )
        if not r.in_band:
            return (
                "out_of_band",
                f"run {r.index}: steady median {r.steady_median_ms:.1f} ms outside {lo:g}-{hi:g} "
                "ms",
            )
    det_text = "videos identical (md5 and frames)" if det else "determinism not judged (one run)"
    return "pass", f"{len(runs)} run(s), {det_text}, steady medians within {lo:g}-{hi:g} ms"


def progress(config: E2EConfig, record: RunRecord) -> str:
    up = "never up" if record.server_up_s is None else f"server up after {record.server_up_s:.1f} s"
    if record.status != "ok":
        return f"run {record.index}/{config.runs}: {up}, {record.status}: {record.error.splitlines()[0]}"
    stopped = "stopped, port free" if config.starts_server else "external server left running"
    if record.steady_median_ms is None:  # no figure shown as 0.0 where nothing was measured
        figures = "no steady chunk: steady figures not measured"
    else:
        figures = (
            f"steady median {record.steady_median_ms:.1f} ms "
            f"(p99 {record.steady_p99_ms or 0:.1f}, mean {record.steady_mean_ms or 0:.1f}), "
            f"steady RTF {record.steady_rtf or 0:.3f}"
        )
    session = "-" if record.session_rtf is None else f"{record.session_rtf:.3f}"
    return f"run {record.index}/{config.runs}: {up}, benchmark ok, {figures}, whole-session RTF {session}; {stopped}"


def table(runs: Sequence[RunRecord]) -> str:
    """The closing table of the runs, one row each; "-" where a run has no such figure."""

    def fmt(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    headers = [
        "run",
        "status",
        "up s",
        "median ms",
        "p99 ms",
        "mean ms",
        "steady RTF",
        "session RTF",
        "md5",
    ]
    rows = [
        (
            r.index,
            r.status,
            fmt(r.server_up_s, 1),
            fmt(r.steady_median_ms, 1),
            fmt(r.steady_p99_ms, 1),
            fmt(r.steady_mean_ms, 1),
            fmt(r.steady_rtf, 3),
            fmt(r.session_rtf, 3),
            r.md5 or "-",
        )
        for r in runs
    ]
    return report.table(headers, rows)


def standin_in_stock_env(ws: Workspace, config: E2EConfig) -> bool:
    """A stand-in whose command names ``{python}``: it runs in the stock leg's closure (vllm, uvicorn,
    av)."""
    template = config.server_cmd or standin_server_cmd(ws.standin_script)
    return config.standin and any("{python}" in arg for arg in template)


def server_env(ws: Workspace, config: E2EConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The server's environment; a stand-in in the stock leg's env reads and writes that leg's .pyc, as
    the leg does (without them each start compiles torch and vllm again where
    PYTHONDONTWRITEBYTECODE is set)."""
    env = determinism.server_env(environ, config.cards, ascend=config.mode == "ascend")
    if standin_in_stock_env(ws, config):
        env = legenv.bytecode_env(env, legenv.pycache_dir(legenv.env_dir(ws, "stock")))
    return env


def prepare(
    ws: Workspace, config: E2EConfig, python: str | None
) -> tuple[list[str], str, dict[str, Any]]:
    """(server command, python for upstream's client, versions): stand-in, external server or the
    patched install."""
    values = {
        "host": config.host,
        "port": str(config.port),
        "model": config.model_name,
        "python": sys.executable,
        "deploy_config": str(config.deploy_config),
        "checkout": str(config.checkout),
    }
    if not config.starts_server:
        return (
            [],
            sys.executable,
            {"note": f"external server at {config.server_url}: versions not visible from here"},
        )
    if config.standin:
        if standin_in_stock_env(ws, config):
            values["python"] = str(legenv.ensure_env(ws, "stock"))
        cmd = fill_cmd(config.server_cmd or standin_server_cmd(ws.standin_script), values)
        return cmd, sys.executable, evidence.standin_versions(values["python"], config.checkout)
    assert python is not None  # preflight refused a run without one
    venv_python = str(install.install(ws, python, config.checkout, ws.e2e_venv))
    values["python"] = venv_python
    template = config.server_cmd or install.serve_command(ws.e2e_venv)
    return fill_cmd(template, values), venv_python, evidence.probe_versions(venv_python)


def execute(
    ws: Workspace, config: E2EConfig, python: str | None, checks: Sequence[preflight.Check]
) -> int:
    folder = evidence.create(config.evidence_root)
    print(f"e2e: {config.mode} mode, evidence in {folder}", flush=True)
    note = {"standin": evidence.STANDIN_NOTE, "external": evidence.EXTERNAL_NOTE}.get(config.mode)
    if note:
        print(f"e2e: NOTE {note}", flush=True)
    runs: list[RunRecord] = []
    det: dict[str, Any] | None = None
    result = ("interrupted", "stopped before a verdict (signal or error)")
    try:
        server_cmd, client_python, versions = prepare(ws, config, python)
        client = benchclient.choose_client(config)
        env = server_env(ws, config, os.environ)
        manifest = {
            "mode": config.mode,
            "ascend": config.mode == "ascend",
            "note": note or "vllm-omni serve on Ascend cards",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": asdict(config),
            "server_cmd": server_cmd,
            "client": client,
            "preflight": [asdict(c) for c in checks],
            "versions": versions,
            "determinism_env": determinism.recorded(env),
            "card_map": _card_map(config),
            "kit": evidence.kit_identity(ws),
        }
        evidence.write_json(folder / "manifest.json", manifest)
        image = benchclient.first_frame(config, folder)
        for index in range(1, config.runs + 1):
            d = folder / f"run-{index}"
            cmd = benchclient.command(
                config, client, client_python, d / "benchmark.json", d / "video.mp4", image
            )
            record = one_run(
                config,
                index,
                folder,
                server_cmd,
                env,
                cmd,
                benchclient.client_env(client, env, ws.root),
            )
            runs.append(record)
            if record.status == "ok":
                judge_performance(record, d / "benchmark.json", config)
            print(progress(config, record), flush=True)
            if record.status != "ok":
                break
        if len(runs) > 1 and all(r.status == "ok" for r in runs):
            det = judge_determinism(folder, runs)
        elif runs and runs[0].status == "ok":
            runs[0].md5 = compare.md5_file(folder / "run-1" / "video.mp4")
        result = verdict(runs, det, config)
    except KitError as error:
        result = ("setup_failed", str(error))
        raise
    except KeyboardInterrupt as stop:  # the server of the run under way was stopped on the way out
        result = (
            "interrupted",
            evidence.interruption(stop, f"run {len(runs) + 1} of {config.runs}"),
        )
        raise
    finally:
        summary = evidence.summary_document(
            verdict=result[0],
            reason=result[1],
            mode=config.mode,
            band_ms=config.band_ms,
            runs=runs,
            determinism=det,
            folder=folder,
        )
        evidence.write_json(folder / "summary.json", summary)
        # The PR body quotes this record; it sits beside the evidence root (.work/records by
        # default).
        records.write(
            config.evidence_root.parent / "records",
            "e2e",
            {**summary, "series_digest": digest_of(load_series(ws.patches))},
        )
        if (folder / "manifest.json").is_file():
            manifest_doc = json.loads((folder / "manifest.json").read_text())
            (folder / "summary.md").write_text(evidence.summary_markdown(summary, manifest_doc))
        print(table(runs), flush=True)
        print(f"e2e: {result[0].upper()}: {result[1]}", flush=True)
        print(f"e2e: evidence {folder}", flush=True)
    return 0 if result[0] == "pass" else 1


def _card_map(config: E2EConfig) -> dict[str, Any]:
    if config.mode != "ascend":
        return {"cards": [], "note": f"{config.mode}: no cards used here"}
    info = preflight.npu_smi_info()
    physical = preflight.logical_cards(info)
    return {
        "logical_cards": list(config.cards),
        "npu_smi_ids": [physical.get(c) for c in config.cards],
        "ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, config.cards)),
        "npu_smi_info": info,
    }


def locked_cards(config: E2EConfig) -> tuple[int, ...]:
    """The cards whose machine-wide locks this run takes: only real ones (a stand-in or a server
    started elsewhere uses none here, so such runs never wait for each other or for a job on the
    cards)."""
    return config.cards if config.mode == "ascend" else ()
