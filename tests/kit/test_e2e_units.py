"""The e2e's pure logic: parameters, npu-smi parsing, metrics, frame comparison, verdicts."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import ephemeral_ports, free_port
from e2e_prereq import PARSING as WS
from kithelpers import NPU_SMI, POD_NPU_SMI

from scripts.e2e import (
    benchclient,
    client,
    compare,
    config,
    determinism,
    evidence,
    metrics,
    preflight,
    run,
)
from scripts.e2e.evidence import RunRecord
from scripts.errors import KitError
from scripts.legs import legenv, suite
from scripts.pr import body
from scripts.series import load_series, series_digest


def test_npu_smi_tables_and_the_cards_check_names_missing_busy_and_physical_cards() -> None:
    assert preflight.parse_npu_ids(NPU_SMI) == {0: "910B1 OK", 1: "910B1 OK"}
    assert preflight.parse_busy_cards(NPU_SMI) == {1: [424242]}
    with pytest.raises(KitError, match=r"cards \[2\] not visible"):
        preflight.check_cards((0, 2), NPU_SMI, {})
    with pytest.raises(KitError, match="cards already in use"):
        preflight.check_cards((0, 1), NPU_SMI, {})
    with pytest.raises(KitError, match="ASCEND_RT_VISIBLE_DEVICES=1 is already set"):
        preflight.check_cards((0,), NPU_SMI, {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    assert preflight.check_cards((0,), NPU_SMI, {}).status == "ok"
    # cards are logical ids of the devices the job sees
    assert preflight.logical_cards(POD_NPU_SMI) == {0: 4, 1: 5}
    assert preflight.busy_cards(POD_NPU_SMI, (0, 1)) == {1: [424242]}
    assert "0: npu-smi id 4 910B1 OK" in preflight.check_cards((0,), POD_NPU_SMI, {}).detail
    with pytest.raises(KitError, match=r"cards \[4\] not visible: this job sees 2 NPU"):
        # a physical id is refused, not mapped by accident
        preflight.check_cards((4,), POD_NPU_SMI, {})


def test_cann_check_wants_the_toolkit_and_atb_sourced(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="CANN environment not sourced"):
        preflight.check_cann({})
    with pytest.raises(KitError, match="ATB environment not sourced"):
        preflight.check_cann({"ASCEND_HOME_PATH": str(tmp_path)})
    assert (
        preflight.check_cann(
            {"ASCEND_HOME_PATH": str(tmp_path), "ATB_HOME_PATH": str(tmp_path)}
        ).status
        == "ok"
    )


def test_parameters_flags_env_defaults_and_the_server_url() -> None:
    cfg = config.parse_args(
        WS, ["/models/lw", "--runs", "3", "--port", "9000"], {"KIT_E2E_BAND": "1:2"}
    )
    assert (cfg.model, cfg.runs, cfg.port, cfg.band_ms, cfg.chunks) == (
        "/models/lw",
        3,
        9000,
        (1.0, 2.0),
        32,
    )
    assert cfg.deploy_config.name == "npu_usp4_eager.yaml" and not cfg.standin
    assert config.parse_args(WS, [], {}).band_ms == config.ASCEND_BAND_MS
    assert config.parse_args(WS, ["--standin"], {}).band_ms == config.STANDIN_BAND_MS
    assert config.fill_cmd(["x", "--port", "{port}"], {"port": "5"}) == ["x", "--port", "5"]
    cfg = config.parse_args(WS, ["--server-url", "ws://10.0.0.5:8091/v1/realtime/video"], {})
    assert (cfg.host, cfg.port, cfg.mode, cfg.starts_server) == (
        "10.0.0.5",
        8091,
        "external",
        False,
    )
    with pytest.raises(KitError, match="both given"):
        config.parse_args(WS, ["--standin", "--server-url", "ws://h:1"], {})


def test_steady_figures_follow_upstream_definitions_and_the_whole_session_rtf_differs() -> None:
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    # numpy's linear default
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert metrics.percentile([7.0], 99) == 7.0
    doc = {
        "workload": {"fps": 16},
        "sessions": [
            {
                "metrics": {"video_rtf": 3.5},
                "chunks": [
                    {"index": i, "inter_arrival_ms": ms, "num_frames": 9 if i == 0 else 12}
                    for i, ms in enumerate([5000.0, 900.0, 750.0, 760.0, 770.0])
                ],
            }
        ],
    }
    steady = metrics.steady_from_benchmark(doc, warmup_chunks=2)
    assert (
        steady.count == 3 and steady.median_ms == 760.0 and steady.mean_ms == pytest.approx(760.0)
    )
    assert steady.rtf == pytest.approx(2.28 / (36 / 16))
    # whole session, reported beside the steady RTF, never mixed into it
    assert steady.session_rtf == 3.5
    # A 3016 ms steady median is steady RTF ~4.02; a first chunk at 45.6 s lifts only the
    # whole-session RTF, to 5.84 for 32 chunks (docs/e2e.md's example).
    chunks = [metrics.Chunk(0, 45.6, 45.6, 1, 9)]
    chunks += [metrics.Chunk(i, 45.6 + 3.016 * i, 3.016, 1, 12) for i in range(1, 32)]
    m = metrics.session_metrics(
        chunks, fps=16, warmup_chunks=6, ttfc_s=45.6, wall_s=chunks[-1].arrival_s
    )
    assert m["interval_steady"]["median_ms"] == pytest.approx(3016.0)
    assert m["steady_video_rtf"] == pytest.approx(4.021, abs=1e-3)
    assert m["video_rtf"] == pytest.approx(5.84, abs=0.01)


def test_client_records_media_chunks_and_the_trailer_bytes_and_refuses_gaps_stops_and_orphans() -> (
    None
):
    session = client.Session()
    media = {"kind": "media", "generation_chunk_index": 0, "num_frames": 9}
    last = client.take_binary(session, media, b"A", 1.0, 0)
    last = client.take_binary(
        session, {**media, "generation_chunk_index": 1, "num_frames": 12}, b"B", 2.0, last
    )
    trailer = {"kind": "trailer", "generation_chunk_index": None, "num_frames": 0}
    assert client.take_binary(session, trailer, b"mfra", 2.5, last) == 2.0
    assert [c.index for c in session.chunks] == [0, 1] and bytes(session.media) == b"ABmfra"
    session = client.Session()  # refused: gaps, stops and orphan frames
    with pytest.raises(client.BenchmarkError, match="not contiguous"):
        client.take_binary(
            session, {"kind": "media", "generation_chunk_index": 1, "num_frames": 12}, b"x", 1.0, 0
        )
    with pytest.raises(client.BenchmarkError, match="no preceding"):
        client.take_binary(session, None, b"x", 1.0, 0)
    with pytest.raises(client.BenchmarkError, match="stopped"):
        client.take_event(session, {"type": "session.done", "chunks": 3, "stopped": True})
    with pytest.raises(client.BenchmarkError, match="Model mismatch"):
        client.take_event(session, {"type": "error", "message": "Model mismatch: ..."})
    assert (
        client.take_event(session, {"type": "session.done", "chunks": 3, "stopped": False}) is True
    )
    assert client.take_event(session, {"type": "session.pong"}) is False


def test_frame_comparison_names_first_frame_and_counts() -> None:
    a = [compare.Frame(2, 1, bytes([10, 10, 10, 20, 20, 20])) for _ in range(4)]
    b = [
        a[0],
        a[1],
        compare.Frame(2, 1, bytes([10, 10, 10, 20, 20, 30])),
        compare.Frame(2, 1, bytes(6)),
    ]
    seen, first, count, worst = compare.compare_frames(zip(a, [*b[:3], None], strict=True))
    assert (seen, first, count) == (4, 2, 2)
    assert worst is not None and worst.max_abs_diff == 10 and 35 < worst.psnr_db < 36


def test_verdict_order_failure_then_determinism_then_band() -> None:
    cfg = config.parse_args(WS, ["--band", "100:200"], {})
    ok = [RunRecord(i, "ok", steady_median_ms=150.0, in_band=True) for i in (1, 2)]
    same = {"md5_equal": True, "frames_equal": True}
    assert run.verdict(ok, same, cfg)[0] == "pass"
    assert run.verdict([RunRecord(1, "server_died", error="x")], None, cfg) == (
        "server_died",
        "run 1: x",
    )
    differ = {
        "md5_equal": False,
        "frames_equal": False,
        "first_diff_frame": 3,
        "differing_frames": 2,
        "max_abs_diff": 9,
        "psnr_db": 40.0,
    }
    assert "from frame 3" in run.verdict(ok, differ, cfg)[1]
    slow = [ok[0], RunRecord(2, "ok", steady_median_ms=250.0, in_band=False)]
    assert run.verdict(slow, same, cfg) == (
        "out_of_band",
        "run 2: steady median 250.0 ms outside 100-200 ms",
    )


def test_a_run_without_a_steady_chunk_shows_no_figure_and_never_passes() -> None:
    """No band verdict and no 0.0 ms where no steady chunk was measured."""
    cfg = config.parse_args(WS, ["--band", "100:200"], {})
    empty = RunRecord(1, "ok", steady_median_ms=None, in_band=None)
    shown = run.progress(cfg, empty)
    assert "no steady chunk: steady figures not measured" in shown and "0.0 ms" not in shown
    assert run.verdict([empty], None, cfg)[0] == "out_of_band"
    measured = RunRecord(1, "ok", steady_median_ms=150.0, in_band=True)
    assert "steady median 150.0 ms" in run.progress(cfg, measured)


def test_both_clients_always_get_an_image(tmp_path: Path) -> None:
    # Upstream's client downloads a default image without --image: the kit always passes one.
    cfg = config.parse_args(WS, ["--width", "16", "--height", "32"], {})
    image = benchclient.first_frame(cfg, tmp_path)
    assert Path(image).read_bytes().startswith(b"\x89PNG") and Path(image).parent == tmp_path
    for name in ("upstream", "kit"):
        cmd = benchclient.command(
            cfg, name, "python3", tmp_path / "b.json", tmp_path / "v.mp4", image
        )
        assert cmd[cmd.index("--image") + 1] == image
        assert ("--ping-interval" in cmd) == (name == "kit")  # upstream's script pings on its own
    given = config.parse_args(WS, ["--image", "/data/first.png"], {})
    assert benchclient.first_frame(given, tmp_path) == "/data/first.png"


def test_the_manifest_names_the_series_by_the_records_digest_and_the_summary_reads_it(
    tmp_path: Path,
) -> None:
    digest = series_digest(load_series(WS.patches))
    kit = evidence.kit_identity(WS)
    assert kit["series_digest"] == digest and "series_sha256" not in kit
    # a PR body can quote it
    assert body.freshness({"series_digest": kit["series_digest"]}, digest) is None
    shutil.copytree(WS.patches, tmp_path / "patches")
    (tmp_path / "patches" / "series").write_text("0001-missing.patch\n", encoding="utf-8")
    # a series that does not load: no digest
    assert evidence.kit_series_digest(tmp_path / "patches") is None
    # the summary reads the series digest, and an old manifest's field
    config_doc = asdict(config.parse_args(WS, ["--standin"], {}))
    summary = evidence.summary_document(
        verdict="pass",
        reason="r",
        mode="standin",
        band_ms=(1.0, 2.0),
        runs=[],
        determinism=None,
        folder=tmp_path,
    )
    for kit, shown in (
        ({"series_digest": "d" * 64}, "d" * 64),
        ({"series_sha256": "e" * 64}, "e" * 64),
    ):
        manifest = {"config": config_doc, "kit": kit, "mode": "standin", "client": "kit"}
        assert f"series digest {shown}" in evidence.summary_markdown(summary, manifest)


def test_a_standin_in_the_stock_env_and_a_leg_get_the_legs_bytecode_and_other_servers_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    env = run.server_env(WS, config.parse_args(WS, ["--standin"], {}), environ)
    assert env["PYTHONPYCACHEPREFIX"] == str(legenv.pycache_dir(legenv.env_dir(WS, "stock")))
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PATH"] == "/bin"
    for argv in (
        ["--standin", "--server-cmd", "python3 my_server.py --port {port}"],
        ["--server-url", "ws://127.0.0.1:9000"],
    ):
        env = run.server_env(WS, config.parse_args(WS, argv, {}), environ)
        assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1", argv
    # the caller's mapping is left as it was
    assert environ == {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    # a leg reads and writes its own bytecode
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = suite.leg_env(
        "stock", "simulated", tmp_path / "co", tmp_path / "pr", tmp_path / "out", tmp_path / "pyc"
    )
    assert (
        env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc") and "PYTHONDONTWRITEBYTECODE" not in env
    )
    assert env["KIT_LEG"] == "stock" and env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"


def test_a_cases_port_is_free_and_below_the_ephemeral_range(tmp_path: Path) -> None:
    # bind(0) and outgoing connections draw from the ephemeral range: a port below it stays free
    # till a case binds it.
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    assert ephemeral_ports(ranges) == range(32768, 61000)
    assert ephemeral_ports(tmp_path / "absent") == range(32768, 61000)
    ports = {free_port(ephemeral_ports(ranges)) for _ in range(20)}
    assert all(12768 <= port < 32768 for port in ports) and len(ports) > 1
    # nothing below a range that starts low: any free port
    assert 0 < free_port(range(1024, 65536)) < 65536


def test_the_runs_closing_table_is_the_kits_table_with_a_dash_for_a_missing_figure() -> None:
    runs = [
        RunRecord(
            1, "ok", server_up_s=41.26, steady_median_ms=3016.2, steady_rtf=4.0216, md5="ab12"
        ),
        RunRecord(2, "server_died"),
    ]
    header, rule, first, second = run.table(runs).splitlines()
    assert header.split() == [
        "run",
        "status",
        "up",
        "s",
        "median",
        "ms",
        "p99",
        "ms",
        "mean",
        "ms",
        "steady",
        "RTF",
        "session",
        "RTF",
        "md5",
    ]
    assert set(rule.replace(" ", "")) == {"-"}
    assert first.split() == ["1", "ok", "41.3", "3016.2", "-", "-", "4.022", "-", "ab12"]
    assert second.split() == ["2", "server_died", *["-"] * 7]


def test_the_ascend_server_env_spawns_workers_stays_offline_and_maps_logical_cards() -> None:
    env = determinism.server_env({"PATH": "/bin"}, (0, 1, 2, 3), ascend=True)
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn" and env["HF_HUB_OFFLINE"] == "1"
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
    assert determinism.recorded(env)["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    standin = determinism.server_env({"PATH": "/bin"}, (), ascend=False)
    assert (
        "VLLM_WORKER_MULTIPROC_METHOD" not in standin and "ASCEND_RT_VISIBLE_DEVICES" not in standin
    )


def bare_python(where: Path, vllm: str | None = None) -> str:
    """A real python with nothing installed (no websockets), and optionally a vllm distribution's
    metadata."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    if vllm:
        (site,) = where.glob("lib/python*/site-packages")
        info = site / f"vllm-{vllm}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {vllm}\n")
    return str(where / "bin" / "python")


def test_preflight_finds_a_client_python_without_websockets_before_any_server(
    tmp_path: Path,
) -> None:
    bare = bare_python(tmp_path / "bare")
    with pytest.raises(
        KitError, match=f"the benchmark client's python {bare} cannot import websockets"
    ):
        preflight.check_client_python(bare)
    assert preflight.check_client_python(sys.executable).status == "ok"
    # the kit's client runs in this interpreter
    assert preflight.check_client_python(None).status == "ok"


@pytest.mark.parametrize(
    ("vllm", "error"),
    [
        ("0.30.1.dev4+g1234", ""),
        ("0.28.0", "vLLM 0.28.0 is not the 0.30"),
        (None, "vLLM (not installed) is not the 0.30 release"),
    ],
)
def test_preflight_refuses_a_vllm_of_another_release(
    tmp_path: Path, vllm: str | None, error: str
) -> None:
    python = bare_python(tmp_path / "py", vllm)
    if error:
        with pytest.raises(KitError, match=re.escape(error)):
            preflight.check_vllm(python, "0.30.0")
    else:
        assert preflight.check_vllm(python, "0.30.0").detail == f"{vllm} ({python})"


@pytest.mark.parametrize(
    ("template", "error"),
    [
        (("{python}", "serve.py", "--port", "{port}"), ""),
        (("sh", "-c", "{model} {deploy_config} {host} {checkout}"), ""),
        (("{nosuch}",), "--server-cmd names unknown placeholder(s) {nosuch}"),
        (
            ("/no/such/vllm-omni", "serve"),
            "--server-cmd program '/no/such/vllm-omni' is not an executable",
        ),
    ],
)
def test_preflight_checks_the_server_command_before_starting_it(
    template: tuple[str, ...], error: str
) -> None:
    if error:
        with pytest.raises(KitError, match=re.escape(error)):
            preflight.check_server_cmd(template)
    else:
        assert preflight.check_server_cmd(template).status == "ok"


def test_preflight_checks_the_first_frame_before_starting_anything(tmp_path: Path) -> None:
    frame = tmp_path / "frame.png"
    frame.write_bytes(b"png")
    for ok in (None, str(frame), "https://example.invalid/frame.png", "data:image/png;base64,AA=="):
        assert preflight.check_image(ok).status == "ok"
    for bad in (str(tmp_path / "missing.png"), str(tmp_path)):
        with pytest.raises(KitError, match="is neither a readable file nor a URL"):
            preflight.check_image(bad)


def test_a_server_command_whose_program_is_filled_in_later_is_not_looked_up_now() -> None:
    assert preflight.check_server_cmd(("{checkout}/serve.sh", "--port", "{port}")).status == "ok"
