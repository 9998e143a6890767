"""CPU regression suite run against a patched vllm-omni tree.

The leg runner points the suite at two trees through the environment:

* ``KIT_CHECKOUT``: root of the patched tree (the kit's working checkout). It is put
  first on ``sys.path`` so ``import vllm_omni`` in this process is the patched code.
* ``KIT_PRISTINE``: root of the pristine pinned tree. It is never imported in this
  process (both trees define the same modules and register the same custom op);
  pristine results are computed in a subprocess (see ``_oracle.py``).
* ``KIT_NPU_MODE``: ``none`` (stock leg, default), ``simulated`` or ``real`` (npu leg).
  Tests that only make sense in one mode ask for the matching fixture.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NPU_MODES = ("none", "simulated", "real")


def _tree_from_env(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        raise pytest.UsageError(
            f"{name} is not set: the regression suite needs {name} to name a vllm-omni tree root "
            "(the directory that contains vllm_omni/). The kit's leg runner sets it."
        )
    root = Path(value).resolve()
    if not (root / "vllm_omni" / "__init__.py").is_file():
        raise pytest.UsageError(
            f"{name}={value} is not a vllm-omni tree root (no vllm_omni/__init__.py in it)"
        )
    return root


def _npu_mode_from_env() -> str:
    mode = os.environ.get("KIT_NPU_MODE", "none")
    if mode not in NPU_MODES:
        raise pytest.UsageError(f"KIT_NPU_MODE={mode!r}: expected one of {', '.join(NPU_MODES)}")
    return mode


CHECKOUT = _tree_from_env("KIT_CHECKOUT")
PRISTINE = _tree_from_env("KIT_PRISTINE")
NPU_MODE = _npu_mode_from_env()
if CHECKOUT == PRISTINE:
    raise pytest.UsageError(
        "KIT_CHECKOUT and KIT_PRISTINE name the same tree; the comparisons would be vacuous"
    )
if "vllm_omni" in sys.modules:
    raise pytest.UsageError(
        "vllm_omni was imported before the regression conftest could select KIT_CHECKOUT"
    )
sys.path.insert(0, str(CHECKOUT))
# The oracle helpers live next to this file.
if str(HERE) not in sys.path:
    sys.path.insert(1, str(HERE))


@contextlib.contextmanager
def _long_lived() -> Iterator[None]:
    """What is made inside lives as long as the process: imports (torch, vllm and vllm-omni leave ~700k
    objects) and the fixtures built from them. The collector would walk all of them again at every
    full collection (a fifth of a leg's CPU): it is off while they are made, and they are frozen out
    of every later collection."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _coverage_started() -> object | None:
    """The coverage.py the leg runner started (pytest-cov's --cov, before this file is imported), if
    any."""
    try:
        import coverage
    except ImportError:  # a plain pytest run of the suite
        return None
    return coverage.Coverage.current()


# Once started, coverage.py's tracer is called on every Python call (Python 3.11 has no cheaper
# hook): about a third of a leg. The runner reads only what the tests run (the NPU-branch lines and
# which test ran each file), so it waits while this file's imports (the code under test's too) and
# the collection's run, and starts again for the first test. A line that runs only at import time
# reads as run by no test: an undercount, never a false "run".
_COVERAGE = _coverage_started()
if _COVERAGE is not None:
    _COVERAGE.stop()

with _long_lived():
    # npu leg: install the simulated NPU (simulated mode) BEFORE anything imports vllm_omni, and
    # resolve vllm-omni's platform without vllm-ascend (both modes); see _npu_leg.py.
    import _npu_leg
    import oracle_cache
    from _npu_leg import npu_device  # noqa: F401  (fixture)
    from _prefix import applied_patches, needed_patches
    from _upstream import UPSTREAM_MARKERS

    SIMULATED_NPU = _npu_leg.prepare(NPU_MODE)
    APPLIED = applied_patches(CHECKOUT)
    # what the tests import (the code under test), now, while coverage.py waits
    if _COVERAGE is not None:
        _npu_leg.import_code_under_test()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    try:
        with _long_lived():  # the test modules' imports
            return (yield)
    finally:
        if _COVERAGE is not None:
            _COVERAGE.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _long_lived():  # fixtures import vllm-omni's models and build them
        return (yield)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    gc.freeze()  # pytest's collections at exit, and interpreter shutdown, need not walk them either


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in UPSTREAM_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")
    config.addinivalue_line(
        "markers", "stock_leg: needs the stock leg (KIT_NPU_MODE=none, no torch_npu)"
    )
    config.addinivalue_line(
        "markers",
        "needs_patches(*slugs): tests what these patches (Kit-Patch slugs) change; deselected on a "
        "checkout that does not hold them all (a prefix of the series, as a stack's PR is tested)",
    )
    config.addinivalue_line(
        "markers", "npu_leg: needs the npu leg (KIT_NPU_MODE=simulated or real)"
    )
    config.addinivalue_line(
        "markers", "simulated_npu: checks the simulated NPU itself (KIT_NPU_MODE=simulated)"
    )
    config.addinivalue_line(
        "markers",
        "simulator_only: needs the simulator's module or counters; never collected in "
        "KIT_NPU_MODE=real",
    )
    config.addinivalue_line(
        "markers",
        "pinned_env: checks a kit-built env against ci/leg-*.txt; in KIT_NPU_MODE=real (an image's "
        "stack) the leg "
        "runner records the stack against the pins instead",
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    applied = (
        "not a kit checkout: every test runs" if APPLIED is None else ", ".join(sorted(APPLIED))
    )
    return [
        f"kit trees: checkout={CHECKOUT} pristine={PRISTINE}",
        f"kit npu mode: {NPU_MODE}",
        f"kit patches applied: {applied or 'none'}",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests of another leg or mode are deselected, not skipped: a skip must never read as a pass.
    other = {
        "none": ("npu_leg", "simulated_npu"),
        "simulated": ("stock_leg",),
        "real": ("stock_leg", "simulated_npu", "simulator_only", "pinned_env"),
    }
    dropped = [item for item in items if any(item.get_closest_marker(m) for m in other[NPU_MODE])]
    # So are the tests of patches a prefix of the series does not hold (each named in the summary).
    if APPLIED is not None:
        missing = {item.nodeid: needed_patches(item) - APPLIED for item in items}
        _not_applied.update(slug for slugs in missing.values() for slug in slugs)
        dropped += [item for item in items if missing[item.nodeid] and item not in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture
def npu_dispatch_rejects_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """NPU eager dispatch as torch / torch_npu before 2.13 had it: None for a mutable argument of a
    custom op is rejected (the simulated NPU too, where it stands in), and the tree's version check
    (npu-empty-stage-buffers) says so."""
    from vllm_omni.experimental.ar_diffusion.kv_cache import paged_attention

    monkeypatch.setattr(paged_attention, "_npu_rejects_none_stage_args", lambda: True)
    if SIMULATED_NPU is not None:
        from npu_standin import simulated_npu

        monkeypatch.setattr(simulated_npu, "REJECTS_NONE_FOR_MUTABLE_ARGS", True)


@pytest.fixture(scope="session")
def checkout_root() -> Path:
    """Root of the patched tree (imported in this process)."""
    return CHECKOUT


@pytest.fixture(scope="session")
def pristine_root() -> Path:
    """Root of the pristine tree (only ever imported in subprocesses)."""
    return PRISTINE


@pytest.fixture(scope="session")
def npu_mode() -> str:
    """Hook point for the npu leg: ``none`` here, ``simulated`` or ``real`` there."""
    return NPU_MODE


def _run_in_tree(
    tree: Path, args: list[str], tmp_dir: Path, *, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Run ``python args...`` with only ``tree`` providing vllm_omni (fresh process, cwd outside both
    trees)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(HERE)])
    env.pop("PYTHONSTARTUP", None)
    # npu leg: prepared like this process
    return subprocess.run(
        [sys.executable, *_npu_leg.subprocess_args(NPU_MODE, args)],
        cwd=tmp_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def run_in_tree():
    """``run_in_tree(tree, args, cwd)``: a fresh interpreter in which only ``tree`` provides vllm_omni."""
    return _run_in_tree


def _oracle_cache_key() -> tuple[Path | None, dict[str, str], str]:
    """(cache dir or None, key, why not cached) from what the leg runner and this env say."""
    import torch

    cache = os.environ.get("KIT_ORACLE_CACHE")
    commit = os.environ.get("KIT_PRISTINE_COMMIT", "")
    # the leg env's build stamp, named by the runner
    stamp_name = os.environ.get("KIT_ENV_STAMP_NAME", "")
    stamp_file = Path(sys.prefix) / stamp_name if stamp_name else None
    stamp = (
        stamp_file.read_text(encoding="utf-8").strip()
        if stamp_file and stamp_file.is_file()
        else ""
    )
    key = oracle_cache.oracle_key(commit, stamp, torch.get_num_threads())
    if not (cache and commit):
        return (
            None,
            key,
            "no cache: KIT_ORACLE_CACHE / KIT_PRISTINE_COMMIT not set (not run by the leg runner)",
        )
    if not stamp:
        return (
            None,
            key,
            "no cache: this interpreter is not a kit leg env (no "
            f"{stamp_name or 'KIT_ENV_STAMP_NAME'})",
        )
    return oracle_cache.oracle_entry(Path(cache), key), key, ""


def _report_oracle(source: str, reason: str, key: dict[str, str]) -> None:
    _oracle_report.update(source=source, reason=reason, **key)
    report = os.environ.get("KIT_ORACLE_REPORT")  # where the leg runner reads it back
    if report:
        path = Path(report)
        path.write_text(
            json.dumps(_oracle_report, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )


_oracle_report: dict[str, str] = {}


@pytest.fixture(scope="session")
def pristine_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every oracle case computed by the pristine tree, in a subprocess; cached across runs
    (oracle_cache.py)."""
    import torch

    cache, key, no_cache = _oracle_cache_key()
    stale = oracle_cache.oracle_stale_reason(cache, key) if cache else no_cache
    if cache and stale is None:
        _report_oracle(
            "cache",
            f"{cache.parent.name}: pristine commit, env stamp, threads and oracle inputs unchanged",
            key,
        )
        return torch.load(cache / oracle_cache.ORACLE_RESULTS, weights_only=True)
    work = tmp_path_factory.mktemp("pristine_oracle")
    out, inputs = work / "pristine.pt", work / "inputs.json"
    proc = _run_in_tree(PRISTINE, [str(HERE / "_oracle.py"), str(out), str(inputs)], work)
    if proc.returncode != 0:
        raise RuntimeError(
            f"pristine oracle failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    if cache:
        oracle_cache.store_oracle(cache, key, out, json.loads(inputs.read_text(encoding="utf-8")))
    _report_oracle("computed", stale, key)
    return torch.load(out, weights_only=True)


_not_applied: set[str] = set()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _npu_leg.pytest_terminal_summary(terminalreporter)
    if _not_applied:
        terminalreporter.write_line(
            "kit: deselected the tests of patches this checkout does not hold: "
            + ", ".join(sorted(_not_applied)),
            bold=True,
        )
    if _oracle_report:
        terminalreporter.write_line(
            f"pristine oracle: {_oracle_report['source']} ({_oracle_report['reason']})", bold=True
        )


@pytest.fixture(scope="session")
def patched_results() -> dict:
    """The same oracle cases computed in this process, by the patched tree.

    LingBot-World is left out: its test builds the module itself (with call spies), so a
    failure there stays in that test instead of erroring every comparison.
    """
    import _oracle

    return _oracle.compute_all(("rope", "paged", "context"))
