"""Leg environments: --python/--require, the uv -> pip fallback (real venvs)."""

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KIT_ROOT
from kithelpers import parse_test_args

from scripts import pipindex
from scripts.errors import KitError
from scripts.legs import legenv, modes
from scripts.workspace import Workspace


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["npu", "--require", "fast"], "argument --require: invalid choice: 'fast'"),
        (["stock", "--require", "real"], "--require real for leg stock"),
        (["--require", "real"], "--require real for leg stock"),  # both legs: stock cannot take it
        (["npu", "--python"], "argument --python: expected one argument"),
    ],
)
def test_bad_leg_options_are_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(KitError, match=message):
        parse_test_args(argv)


def test_leg_options_are_split_off_and_require_real_on_a_simulated_leg_fails_naming_the_import_error() -> (
    None
):
    seen = {
        "torch_npu": "2.13.0",
        "torch_npu_import": "ImportError: libhccl.so: cannot open shared object file",
    }
    real = r"mode simulated, but --require real: import torch_npu failed: .*libhccl"
    with pytest.raises(modes.ModeNotMet, match=real):
        modes.require_mode("npu", "simulated", "real", seen)
    assert "not installed" in str(
        modes.mode_shortfall("simulated", "real", {"torch_npu": "absent"})
    )
    with pytest.raises(
        modes.ModeNotMet, match="mode real, but --require simulated: .*drop --require"
    ):
        modes.require_mode("npu", "real", "simulated", seen)
    modes.require_mode("npu", "simulated", "simulated", seen)  # met: no error
    modes.require_mode("npu", "simulated", None, seen)  # nothing required
    got = parse_test_args(
        ["npu", "-k", "fp32", "--python", "/usr/bin/python3", "--require=real", "-x"]
    )
    assert got.options == legenv.LegOptions(python=Path("/usr/bin/python3"), require="real")
    assert got.pytest_args == ["-k", "fp32", "-x"]
    got = parse_test_args(["stock", "-q"])
    assert (got.options, got.pytest_args) == (legenv.LegOptions(), ["-q"])


def test_uv_plan_syncs_the_exact_pins_and_overlays_the_test_runner(tmp_path: Path) -> None:
    plan = legenv.uv_plan(
        "uv", "0.13.9", Path("/py"), tmp_path / "env", tmp_path / "leg-npu.txt", None, []
    )
    (_, create), (_, fill) = plan.steps
    assert create[:2] == ("uv", "venv") and "--system-site-packages" not in create
    assert fill[:3] == ("uv", "pip", "sync") and fill[-1].endswith("leg-npu.txt")
    overlay = legenv.uv_plan(
        "uv", "0.13.9", Path("/py"), tmp_path / "o", None, tmp_path / "tools.txt", []
    )
    assert "--system-site-packages" in overlay.steps[0][1] and "--no-deps" in overlay.steps[1][1]
    # the overlay's tools: the test runner's leg pins
    tools = legenv.tools_text(Workspace(KIT_ROOT))
    pins = legenv.parse_pins((KIT_ROOT / "ci" / "leg-stock.txt").read_text(encoding="utf-8"))
    assert f"pytest=={pins['pytest']}\n" in tools and f"pytest-cov=={pins['pytest-cov']}\n" in tools
    # uv's package list is counted, not printed
    assert legenv.is_package_list_line(" + torch==2.13.0")
    assert not legenv.is_package_list_line("Installed 184 packages in 2.10s")


def test_the_npu_env_is_a_layer_of_torch_npu_on_the_stock_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(KIT_ROOT)
    stock = legenv.leg_pins(ws, "stock")
    assert legenv.layer_pins(legenv.leg_pins(ws, "npu"), stock) == "torch-npu==2.13.0\n"
    # a version it differs in, too
    assert legenv.layer_pins({**stock, "torch": "0.0.1"}, stock) == "torch==0.0.1\n"
    layer, lower = tmp_path / "envs" / "npu" / "site", tmp_path / "envs" / "stock" / "site"
    layer.mkdir(parents=True), lower.mkdir(parents=True)
    (layer / legenv.LAYER_PTH).write_text(legenv.layer_pth(layer, lower), encoding="utf-8")
    # relative: still right after the checkout moves
    moved = tmp_path.rename(tmp_path.with_name("moved"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    site.addsitedir(str(moved / "envs" / "npu" / "site"))
    assert sys.path[-2:] == [
        str(moved / "envs" / "npu" / "site"),
        str(moved / "envs" / "stock" / "site"),
    ]


@pytest.mark.network  # pip installs the pin from the package registry, with this machine's settings
def test_uv_failure_falls_back_to_pip_and_a_failure_both_ways_is_one_error(
    tmp_path: Path, capsys
) -> None:
    # Real tools on a one-package pin file: uv is pointed at an index that does not exist, so it
    # fails; pip, with this machine's own settings, then builds the same env.
    uv = legenv.uv_executable()
    assert uv is not None, "uv is missing: pip install -r ci/kit-tools.txt"
    pins, env = tmp_path / "pins.txt", tmp_path / "env"
    pins.write_text("iniconfig==2.3.1\n")
    broken_index = ["--index-url", (tmp_path / "no-such-index").as_uri(), "--offline"]
    plans = [
        legenv.uv_plan(uv[0], uv[1], Path(sys.executable), env, pins, None, broken_index),
        legenv.pip_plan(Path(sys.executable), env, pins, None),
    ]
    environ = {**os.environ, **pipindex.installer_env(os.environ)}
    assert legenv.run_plans("t", env, plans, environ) == "pip"
    subprocess.run([legenv.env_python(env), "-c", "import iniconfig"], check=True)
    assert f"uv {uv[1]}: sync the pins failed with exit" in capsys.readouterr().out
    # A build that fails both ways (pip asks for a version that does not exist) is one error and
    # leaves nothing.
    pins.write_text("iniconfig==0.0.0.kit.does.not.exist\n")
    env = tmp_path / "env-2"
    with pytest.raises(KitError, match="pip: install the pins failed with exit"):
        legenv.run_plans(
            "t", env, [legenv.pip_plan(Path(sys.executable), env, pins, None)], dict(os.environ)
        )
    assert not env.exists()


def test_an_env_reached_through_a_linked_envs_folder_runs_by_its_real_path(tmp_path: Path) -> None:
    # Copies of the kit link .work/envs; .pyc go by source path, so a python run through the link
    # would compile site-packages again per copy. Every way to the env's python and .pyc gives the
    # real path.
    real = tmp_path / "shared-envs"
    (real / "stock" / "bin").mkdir(parents=True)
    copy = Workspace(tmp_path / "copy")
    copy.work.mkdir(parents=True)
    copy.envs.symlink_to(real, target_is_directory=True)
    env = legenv.env_dir(copy, "stock")
    assert legenv.env_python(env) == real.resolve() / "stock" / "bin" / "python"
    assert legenv.pycache_dir(env).is_relative_to(real.resolve())
