"""The kit's client against vllm-omni's own realtime video handler
(tests/standins/omni_realtime_server.py: only the engine stands in), served from the copy's checkout
in the stock leg's env; the servers start once, in parallel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import free_port
from e2e_prereq import ensure_checkout_and_stock_env

from scripts.e2e import server
from scripts.legs import legenv
from scripts.workspace import Workspace

pytestmark = pytest.mark.e2e

av = pytest.importorskip("av", reason="frames are decoded with PyAV (ci/kit-dev-tools.txt)")

CHUNKS = ["--num-chunks", "3", "--warmup-chunks", "1", "--width", "64", "--height", "48"]
FRAMES = 9 + 12 + 12
# Three servers (each start is seconds of CPU). "slow" is the stall case scaled down (stall
# timeout 2 s, first chunk after 4 s); it serves the same frames later, so it is also the second
# server whose bytes must equal a's.
SLOW = ["--stall-timeout-s", "2", "--first-chunk-delay-ms", "4000"]
STALLED, RUNNING = "Stall timeout: no generation progress", "server is running 'lingbot-world'"
SERVERS = {
    "a": [],
    "slow": SLOW,
    "dies": ["--fault", "die-mid-session", "--fault-after-chunks", "2"],
}


@dataclass
class Served:
    port: int
    handle: server.Server
    kit: Workspace  # the copy of the kit whose checkout it serves (clients run there too)


@pytest.fixture(scope="module")
def servers(
    e2e_kit: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Served]]:
    python = ensure_checkout_and_stock_env(e2e_kit)
    logs = tmp_path_factory.mktemp("servers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    # as the e2e starts them
    env = legenv.bytecode_env(env, legenv.pycache_dir(legenv.env_dir(e2e_kit, "stock")))
    started: dict[str, Served] = {}
    for name, extra in SERVERS.items():
        port = free_port()
        cmd = [
            str(python),
            str(e2e_kit.standin_script),
            "--port",
            str(port),
            "--checkout",
            str(e2e_kit.checkout),
            "--chunk-interval-ms",
            "30",
            *extra,
        ]
        with (logs / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        started[name] = Served(port, server.Server(proc, logs / f"{name}.log"), e2e_kit)
    try:
        for name, s in started.items():
            try:
                server.wait_healthy(s.handle, f"http://127.0.0.1:{s.port}/health", 300)
            except (server.ServerDiedError, server.ServerUnhealthyError) as error:
                pytest.fail(f"server {name}: {error}\n{server.log_tail(s.handle.log_path)}")
        yield started
    finally:
        for s in started.values():
            server.stop(s.handle, 5)


def bench(
    served: Served, tmp_path: Path, *extra: str, name: str = "b"
) -> subprocess.CompletedProcess[str]:
    out = [
        "--output-json",
        str(tmp_path / f"{name}.json"),
        "--save-video",
        str(tmp_path / f"{name}.mp4"),
    ]
    cmd = [
        sys.executable,
        "-m",
        "scripts.e2e.client",
        "--port",
        str(served.port),
        *CHUNKS,
        *out,
        *extra,
    ]
    return subprocess.run(cmd, cwd=served.kit.root, capture_output=True, text=True, timeout=120)


def top_level_boxes(data: bytes) -> list[bytes]:
    kinds, pos = [], 0
    while pos + 8 <= len(data):
        kinds.append(data[pos + 4 : pos + 8])
        pos += int.from_bytes(data[pos : pos + 4], "big")
    return kinds


def decoded_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_success_keeps_the_trailer_and_another_server_the_bytes(
    servers: dict[str, Served], tmp_path: Path
) -> None:
    done = bench(servers["a"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    session = json.loads((tmp_path / "b.json").read_text())["sessions"][0]
    assert [(c["index"], c["num_frames"]) for c in session["chunks"]] == [(0, 9), (1, 12), (2, 12)]
    assert session["request_id"].startswith("video_stream-")  # the handler's own id
    # the trailer is in the saved video and every frame decodes
    video = (tmp_path / "b.mp4").read_bytes()
    media_bytes = sum(c["byte_length"] for c in session["chunks"])
    assert len(video) > media_bytes  # the trailer frame was kept
    assert top_level_boxes(video)[-1] == b"mfra"
    assert decoded_frames(tmp_path / "b.mp4") == FRAMES
    # Without the trailer the muxer's last fragment is missing: frames are lost.
    (tmp_path / "cut.mp4").write_bytes(video[:media_bytes])
    assert decoded_frames(tmp_path / "cut.mp4") < FRAMES
    # Another process with another timing (its first chunk 4 s late, pings keeping the session): the
    # same bytes.
    assert bench(servers["slow"], tmp_path, "--ping-interval", "0.5", name="slow").returncode == 0
    assert (tmp_path / "slow.mp4").read_bytes() == video
    # A different seed changes the frames: the equality above is not a constant.
    assert bench(servers["a"], tmp_path, "--seed", "7", name="seed").returncode == 0
    assert (tmp_path / "seed.mp4").read_bytes() != video


@pytest.mark.parametrize(
    ("name", "extra", "code", "said"),
    [
        (
            "slow",
            ["--ping-interval", "0.5"],
            0,
            "",
        ),  # pings carry a slow first chunk past the stall timeout
        (
            "slow",
            ["--ping-interval", "0"],
            1,
            f"Server rejected the session after 0 chunk(s): {STALLED}",
        ),
        (
            "a",
            ["--model", "another-model"],
            1,
            f"Model mismatch: request specifies 'another-model' but {RUNNING}",
        ),
        ("dies", [], 1, "closed the connection after 2 chunk(s) without session.done"),
    ],
    ids=[
        "pings-carry-a-slow-first-chunk",
        "without-pings-the-stall-error",
        "model-name-mismatch",
        "server-closing",
    ],
)
def test_the_handlers_answer_is_the_clients_outcome(
    servers: dict[str, Served], tmp_path: Path, name: str, extra: list[str], code: int, said: str
) -> None:
    done = bench(servers[name], tmp_path, *extra)
    assert done.returncode == code and said in done.stderr, done.stdout + done.stderr
    if name == "dies":
        assert servers["dies"].handle.proc.wait(timeout=30) == 3


def test_e2e_against_an_already_running_server(servers: dict[str, Served], tmp_path: Path) -> None:
    root = tmp_path / "evidence"
    url = f"ws://127.0.0.1:{servers['a'].port}"
    run = f"--server-url {url} --chunks 3 --warmup-chunks 1 --width 64 --height 48 --runs 2 --band 10:400"
    cmd = [sys.executable, "-m", "scripts", "e2e", *run.split()]
    cmd += ["--evidence-root", str(root), "--lock-dir", str(tmp_path / "locks")]
    done = subprocess.run(
        cmd, cwd=servers["a"].kit.root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = root.iterdir()
    summary = json.loads((folder / "summary.json").read_text())
    assert (
        summary["verdict"] == "pass" and summary["mode"] == "external" and not summary["stand_in"]
    )
    assert summary["determinism"]["frames_equal"] and summary["determinism"]["frame_counts"] == [
        FRAMES,
        FRAMES,
    ]
    assert "external server" in (folder / "summary.md").read_text()
    time.sleep(0.2)
    # left running: the e2e did not start it, so it does not stop it
    assert servers["a"].handle.proc.poll() is None
