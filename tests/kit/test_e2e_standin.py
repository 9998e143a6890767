"""`python -m scripts e2e --standin` in a subprocess, on a copy of the kit: the verdict, the evidence
files, and no process of the case left (by process group and by the case's unique port), for success
and each fault."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port, live_pids
from e2e_prereq import ensure_checkout_and_stock_env

from scripts.e2e import evidence, server
from scripts.legs import legenv
from scripts.workspace import Workspace

pytestmark = pytest.mark.e2e

pytest.importorskip("av", reason="the stand-in needs PyAV (ci/kit-dev-tools.txt)")
pytest.importorskip("websockets", reason="the stand-in needs websockets (ci/kit-dev-tools.txt)")

# the handler's stall timeout (2 s) before a first chunk 4 s late
STALLS = {"STANDIN_STALL_TIMEOUT_S": "2", "STANDIN_FIRST_CHUNK_DELAY_MS": "4000"}
STALLED = "Stall timeout: no generation progress"
RUN_FILES = {"server.log", "benchmark.log", "benchmark.json", "video.mp4", "frames.sha256"}


@pytest.fixture(scope="module", autouse=True)
def _checkout_and_stock_env(e2e_kit: Workspace) -> None:
    # the stand-in serves the copy's handler from the stock leg's env
    ensure_checkout_and_stock_env(e2e_kit)


def processes_mentioning(port: int) -> list[int]:
    # stand-in and client: --port
    return live_pids(lambda args: str(port).encode() in args and b"--port" in args)


class Case:
    def __init__(
        self,
        kit: Workspace,
        tmp_path: Path,
        fault: str = "none",
        *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.root = tmp_path / "evidence"
        run = f"--standin --port {self.port} --chunks 4 --warmup-chunks 1 --width 64 --height 48"
        waits = "--health-timeout-s 300 --bench-timeout-s 60 --stop-timeout-s 5"
        cmd = [sys.executable, "-m", "scripts", "e2e", *f"{run} {waits}".split()]
        cmd += ["--evidence-root", str(self.root), "--lock-dir", str(tmp_path / "locks"), *extra]
        case_env = {
            **os.environ,
            "STANDIN_FAULT": fault,
            "STANDIN_CHUNK_INTERVAL_MS": "60",
            **(env or {}),
        }
        self.done = subprocess.run(
            cmd, cwd=kit.root, env=case_env, capture_output=True, text=True, timeout=120
        )

    @property
    def folder(self) -> Path:
        (folder,) = self.root.iterdir()
        return folder

    def assert_verdict(self, verdict: str, code: int, runs: int) -> dict[str, Any]:
        """The verdict and exit code, the evidence files, and no process of the case left."""
        assert self.done.returncode == code, self.done.stdout + self.done.stderr
        summary: dict[str, Any] = json.loads((self.folder / "summary.json").read_text())
        assert summary["verdict"] == verdict and len(summary["runs"]) == runs
        assert summary["stand_in"] is True and summary["mode"] == "standin"
        assert {"manifest.json", "summary.json", "summary.md"} <= {
            p.name for p in self.folder.iterdir()
        }
        assert "stand-in" in (self.folder / "summary.md").read_text()
        manifest = json.loads((self.folder / "manifest.json").read_text())
        assert manifest["ascend"] is False and manifest["mode"] == "standin"
        for run in summary["runs"]:
            assert (self.folder / f"run-{run['index']}" / "server.log").is_file()
            assert server.group_members(run["server_pgid"]) == []
            with pytest.raises(ProcessLookupError):
                os.killpg(run["server_pgid"], 0)
        assert processes_mentioning(self.port) == [] and server.port_free("127.0.0.1", self.port)
        return summary


def test_deterministic_success(e2e_kit: Workspace, tmp_path: Path) -> None:
    case = Case(e2e_kit, tmp_path)
    summary = case.assert_verdict("pass", 0, runs=2)
    for run in summary["runs"]:
        assert RUN_FILES <= set(run["files"])
        assert 30 < run["steady_median_ms"] < 400 and run["in_band"] is True
    assert summary["runs"][0]["md5"] == summary["runs"][1]["md5"]
    assert summary["determinism"]["md5_equal"] and summary["determinism"]["frames_equal"]
    assert summary["determinism"]["frame_counts"] == [45, 45]
    assert "run 1/2: server up after" in case.done.stdout and "PASS" in case.done.stdout
    # The stand-in is upstream's handler from the checkout, and the evidence says so.
    manifest = json.loads((case.folder / "manifest.json").read_text())
    assert Path(manifest["server_cmd"][1]).name == "omni_realtime_server.py"
    assert manifest["server_cmd"][0] == str(legenv.env_python(legenv.env_dir(e2e_kit, "stock")))
    # by the env's real path, not the link
    assert not Path(manifest["server_cmd"][0]).is_relative_to(e2e_kit.root)
    handler = e2e_kit.checkout / evidence.HANDLER_REL
    # as sha256sum
    assert (
        manifest["versions"]["handler_sha256"] == hashlib.sha256(handler.read_bytes()).hexdigest()
    )
    md = (case.folder / "summary.md").read_text()
    assert "vllm-omni's own realtime video handler" in md and "whole-session RTF" in md


def test_nondeterministic_bytes_name_the_first_frame(e2e_kit: Workspace, tmp_path: Path) -> None:
    case = Case(e2e_kit, tmp_path, "nondeterministic", env={"STANDIN_NONDET_FROM_FRAME": "21"})
    summary = case.assert_verdict("nondeterministic", 1, runs=2)
    det = summary["determinism"]
    assert not det["md5_equal"] and not det["frames_equal"]
    assert det["first_diff_frame"] == 21 and det["differing_frames"] == 45 - 21
    assert det["max_abs_diff"] > 0 and det["psnr_db"] < 60
    assert "from frame 21" in summary["reason"]
    assert len((case.folder / "run-2" / "frames.sha256").read_text().splitlines()) == 45


@pytest.mark.parametrize(
    ("fault", "extra", "env", "verdict", "reason"),
    [
        (
            "never-healthy",
            ["--health-timeout-s", "2"],
            {},
            "server_unhealthy",
            "not healthy after 2 s",
        ),
        ("die-mid-session", [], {}, "server_died", "exited with code 3"),
        ("error", [], {}, "server_error", "injected error"),
        ("none", ["--runs", "1", "--ping-interval-s", "0"], STALLS, "server_error", STALLED),
        # A stalled engine keeps the handler's session open, so the server outlives SIGTERM: the
        # stop escalates to SIGKILL after the stop timeout (1 s here, not the cases' 5 s: the
        # escalation is the same, 4 s sooner).
        (
            "stall",
            ["--bench-timeout-s", "3", "--stop-timeout-s", "1"],
            {},
            "benchmark_timeout",
            "after 3 s",
        ),
    ],
    ids=[
        "never-healthy",
        "dies-mid-session",
        "sends-error",
        "handlers-stall-timeout",
        "benchmark-times-out",
    ],
)
def test_a_fault_is_the_runs_verdict(
    e2e_kit: Workspace,
    tmp_path: Path,
    fault: str,
    extra: list[str],
    env: dict[str, str],
    verdict: str,
    reason: str,
) -> None:
    case = Case(e2e_kit, tmp_path, fault, *extra, env=env)
    summary = case.assert_verdict(verdict, 1, runs=1)
    error = summary["runs"][0]["error"]
    assert reason in summary["reason"] and reason in error
    assert ("server log tail" in error) == (verdict in ("server_died", "server_unhealthy"))
    # the client ran
    assert (case.folder / "run-1" / "benchmark.log").is_file() == (fault != "never-healthy")


def test_port_already_taken_stops_at_preflight(e2e_kit: Workspace, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        case = Case(e2e_kit, tmp_path, "none", "--port", str(port))
    assert case.done.returncode == 2 and case.done.stderr.strip().count("\n") == 0
    assert f"port {port} on 127.0.0.1 is already in use" in case.done.stderr
    assert not case.root.exists() or not list(case.root.iterdir())
    assert processes_mentioning(port) == []


@pytest.mark.skipif(
    any(Path(p, "npu-smi").exists() for p in os.environ.get("PATH", "").split(os.pathsep)),
    reason="an Ascend host: the no-card preflight line cannot be shown here",
)
def test_cpu_host_without_standin_stops_at_preflight(e2e_kit: Workspace, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIT_E2E_")}
    # the run's own inputs pass: the first check that fails is the machine's
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_index.json").write_text("{}")
    argv = [
        sys.executable,
        "-m",
        "scripts",
        "e2e",
        str(model),
        "--evidence-root",
        str(tmp_path / "ev"),
    ]
    done = subprocess.run(
        argv, cwd=e2e_kit.root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "kit: error: no Ascend cards visible: npu-smi not found -- run on an Ascend runner with "
        "the driver mounted "
        "(npu-smi on PATH), or pass --standin"
    ]
    assert not (tmp_path / "ev").exists()
