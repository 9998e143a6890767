"""The fast edit-test loop: the pristine oracle cache (on real files), legs in parallel, --changed
selection, and a carrier's loop in a copy of the kit (``legs``) that selects changed modules and
uses or rebuilds the cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from kithelpers import assert_control_passed, leg_kit, parse_test_args, shared_env_ready

from scripts.commands import test as test_command
from scripts.errors import KitError
from scripts.gitcmd import git
from scripts.legs import suite

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "regression"))
import oracle_cache  # noqa: E402  (the suite's own module: the leg never imports the kit)

KEY = oracle_cache.oracle_key("a" * 40, "stamp-1", 2)


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(cache dir, the oracle script, a pristine module) after one stored run."""
    oracle = tmp_path / "kit" / "_oracle.py"
    pristine = tmp_path / "pristine" / "vllm_omni" / "__init__.py"
    for path, text in ((oracle, "CASES = [1, 2]\n"), (pristine, "VERSION = '0.30.0'\n")):
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
    results = tmp_path / "computed.pt"
    results.write_bytes(b"results of the pristine tree" * 100)
    oracle_cache.store_oracle(tmp_path / "cache", KEY, results, [str(oracle), str(pristine)])
    return tmp_path / "cache", oracle, pristine


STALE = {  # each damages the cache or returns the key to check with
    "another_pin": (
        lambda f: oracle_cache.oracle_key("b" * 40, "stamp-1", 2),
        "pristine_commit changed",
    ),
    "another_env": (lambda f: oracle_cache.oracle_key("a" * 40, "stamp-2", 2), "env_stamp changed"),
    "other_threads": (lambda f: oracle_cache.oracle_key("a" * 40, "stamp-1", 1), "threads changed"),
    "oracle_edited": (
        lambda f: f.oracle.write_text("CASES = [1, 2, 3]\n", encoding="utf-8"),
        "_oracle.py changed",
    ),
    "pristine_file_edited": (
        lambda f: f.pristine.write_text("VERSION = '0.31.0'\n", encoding="utf-8"),
        "__init__.py changed",
    ),
    "oracle_gone": (lambda f: f.oracle.unlink(), "_oracle.py is gone"),
    "results_truncated": (
        lambda f: f.results.write_bytes(f.results.read_bytes()[:100]),
        "pristine.pt is missing or corrupt",
    ),
    "results_deleted": (lambda f: f.results.unlink(), "pristine.pt is missing or corrupt"),
    "manifest_garbage": (
        lambda f: f.manifest.write_text('{"key": ', encoding="utf-8"),
        "manifest.json is corrupt",
    ),
    "manifest_gone": (lambda f: f.manifest.unlink(), "no cached results yet"),
}


@pytest.mark.parametrize("change", STALE)
def test_any_change_or_damage_makes_the_cache_stale(
    cache: tuple[Path, Path, Path], change: str
) -> None:
    cache_dir, oracle, pristine = cache
    results, manifest = (
        cache_dir / oracle_cache.ORACLE_RESULTS,
        cache_dir / oracle_cache.ORACLE_MANIFEST,
    )
    make, expected = STALE[change]
    key = make(
        SimpleNamespace(oracle=oracle, pristine=pristine, results=results, manifest=manifest)
    )
    reason = oracle_cache.oracle_stale_reason(cache_dir, key if isinstance(key, dict) else KEY)
    assert reason is not None and expected in reason, reason


def test_each_thread_budget_keeps_its_own_entry_and_never_evicts_another(tmp_path: Path) -> None:
    """A leg run alone and one beside the other leg have other thread budgets: both stay trusted."""
    oracle = tmp_path / "_oracle.py"
    oracle.write_text("CASES = [1]\n", encoding="utf-8")
    keys = [oracle_cache.oracle_key("a" * 40, "stamp-1", threads) for threads in (1, 2)]
    for key in keys:
        results = tmp_path / f"computed-{key['threads']}.pt"
        results.write_bytes(f"results with {key['threads']} threads".encode())
        oracle_cache.store_oracle(
            oracle_cache.oracle_entry(tmp_path / "cache", key), key, results, [str(oracle)]
        )
    for key in keys:
        entry = oracle_cache.oracle_entry(tmp_path / "cache", key)
        assert oracle_cache.oracle_stale_reason(entry, key) is None
        assert (
            entry / oracle_cache.ORACLE_RESULTS
        ).read_bytes() == f"results with {key['threads']} threads".encode()
    assert len({oracle_cache.oracle_entry(tmp_path / "cache", key) for key in keys}) == 2


def test_a_new_store_repairs_a_damaged_cache(
    cache: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    cache_dir, oracle, pristine = cache
    (cache_dir / oracle_cache.ORACLE_RESULTS).write_bytes(b"torn")
    fresh = tmp_path / "again.pt"
    fresh.write_bytes(b"recomputed")
    oracle_cache.store_oracle(cache_dir, KEY, fresh, [str(oracle), str(pristine)])
    assert oracle_cache.oracle_stale_reason(cache_dir, KEY) is None
    assert (cache_dir / oracle_cache.ORACLE_RESULTS).read_bytes() == b"recomputed"


def test_the_oracle_inputs_are_what_no_env_stamp_covers(tmp_path: Path) -> None:
    """A layered env (the npu leg's) imports its lower env's packages through a .pth: its stamp covers
    them, so they are not hashed on every run; the pristine tree and the oracle's code, on the path
    too, are."""
    layer, lower_site = tmp_path / "envs/npu", tmp_path / "envs/stock/lib/python3.11/site-packages"
    pristine, oracle = (
        tmp_path / "pristine/vllm_omni/__init__.py",
        tmp_path / "tests/regression/_oracle.py",
    )
    layer_module = layer / "lib/python3.11/site-packages/torch_npu/__init__.py"
    loaded = {layer_module, lower_site / "torch/__init__.py", pristine, oracle}
    path = [str(oracle.parent), str(pristine.parent.parent), str(lower_site)]
    assert oracle_cache.outside_env(loaded, {layer}, path) == sorted(map(str, (oracle, pristine)))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], (("stock", "npu"), None, False, [])),
        (["stock"], (("stock",), None, False, [])),
        (["stock", "-k", "rope", "--changed"], (("stock",), None, True, ["-k", "rope"])),
        (["--jobs", "1", "--durations=15"], (("stock", "npu"), 1, False, ["--durations=15"])),
        (["npu", "--jobs=2", "-k", "stock"], (("npu",), 2, False, ["-k", "stock"])),
    ],
)
def test_parse_test_args(argv: list[str], expected: tuple) -> None:
    got = parse_test_args(argv)
    assert (got.legs, got.jobs, got.changed, got.pytest_args) == expected


def test_every_test_flag_is_parsed_by_test_and_kept_from_other_nox_sessions() -> None:
    # `nox -s refresh test -- --changed`: nox hands one posargs list to both sessions, so the
    # noxfile strips test's options (read from test's own parser) from the others; none of them
    # reaches pytest.
    import noxfile

    argv = ["--changed", "--jobs", "1", "--python=/usr/bin/python3", "--require", "real"]
    assert sorted(test_command.flags()) == ["--changed", "--jobs", "--python", "--require"]
    assert parse_test_args(["npu", *argv]).pytest_args == []
    assert noxfile.without_test_flags([*argv, "--drop", "0002"]) == ["--drop", "0002"]
    assert noxfile.without_test_flags(["--jobs=1", "--drop", "0002"]) == ["--drop", "0002"]


def test_bad_jobs_is_one_clear_error_and_no_prefix_of_an_option_is_taken_for_it() -> None:
    for bad in (["--jobs", "0"], ["--jobs"], ["--jobs=two"]):
        with pytest.raises(KitError, match="argument --jobs: "):
            parse_test_args(bad)
    # pytest's to judge
    assert parse_test_args(["--job", "1", "--py"]).pytest_args == ["--job", "1", "--py"]


@pytest.mark.parametrize(
    ("legs_n", "jobs", "cores", "expected"),
    [
        (2, None, 2, (2, 1)),
        (2, None, 8, (2, 4)),
        (2, None, 1, (1, 1)),
        (2, 1, 8, (1, 8)),
        (1, None, 4, (1, 4)),
    ],
)
def test_plan_jobs(legs_n: int, jobs: int | None, cores: int, expected: tuple[int, int]) -> None:
    assert suite.plan_jobs(legs_n, jobs, cores) == expected


def test_status_line_shows_each_running_leg() -> None:
    line = suite.status_line(
        {"stock": (10.0, b"....  [ 41%]\n...  [ 63%]"), "npu": (12.0, b"collecting")}, 40.0
    )
    assert line == "running: stock 30s 63% | npu 28s starting"


def test_run_parallel_prints_one_block_per_leg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = "import os, sys, time; time.sleep(float(sys.argv[1])); print('out of', os.environ['LEG']); sys.exit(int(sys.argv[2]))"  # noqa: E501
    cmds = {
        "slow": [sys.executable, "-c", code, "1.5", "0"],
        "fast": [sys.executable, "-c", code, "0", "3"],
    }
    envs = {leg: {"LEG": leg, "PATH": "/usr/bin:/bin"} for leg in cmds}
    logs = {leg: tmp_path / leg / "output.log" for leg in cmds}
    done = suite.run_parallel(cmds, envs, logs, tmp_path, live=False)
    assert {leg: rc for leg, (rc, _) in done.items()} == {"slow": 0, "fast": 3}
    out = capsys.readouterr().out
    # The fast leg's block comes first and whole, although both ran at once.
    assert (
        out.index("leg fast: FAILED (exit 3)")
        < out.index("out of fast")
        < out.index("end of leg fast")
    )
    assert out.index("end of leg fast") < out.index("leg slow: passed") < out.index("out of slow")


CONTEXT = {"pin": "p1", "env": "e1", "mode": "none", "kit": "k1"}
PATCHES = {"0001-rope.patch": "d1", "0002-test.patch": "d2", "0006-config.patch": "d6"}
FILES = {
    "0001-rope.patch": ["vllm_omni/rope.py"],
    "0002-test.patch": ["tests/test_rope.py"],
    "0006-config.patch": ["configs/npu.yaml"],
}
COVERAGE = {
    "vllm_omni/rope.py": ["tests/regression/test_rope.py", "tests/regression/test_replay.py"],
    "tests/test_rope.py": ["tests/regression/test_upstream.py"],
}
MODULES = [
    "tests/regression/test_replay.py",
    "tests/regression/test_rope.py",
    "tests/regression/test_stock.py",
    "tests/regression/test_upstream.py",
]
GREEN = suite.green_record(CONTEXT, PATCHES, FILES, COVERAGE)


def test_changed_patch_selects_the_modules_that_executed_its_files() -> None:
    selection = suite.select_changed(
        GREEN, CONTEXT, {**PATCHES, "0001-rope.patch": "d1-edited"}, FILES, MODULES
    )
    assert selection.targets == ["tests/regression/test_replay.py", "tests/regression/test_rope.py"]
    assert selection.skipped == [
        "tests/regression/test_stock.py",
        "tests/regression/test_upstream.py",
    ]
    assert selection.rows == [
        ("0001-rope.patch", "vllm_omni/rope.py", "test_replay.py, test_rope.py")
    ]


def test_a_file_the_patch_no_longer_touches_still_counts() -> None:
    # 0002 moved from tests/test_rope.py to vllm_omni/rope.py: tests of both files run.
    moved = {**FILES, "0002-test.patch": ["vllm_omni/rope.py"]}
    selection = suite.select_changed(
        GREEN, CONTEXT, {**PATCHES, "0002-test.patch": "d2-moved"}, moved, MODULES
    )
    assert selection.targets == [
        "tests/regression/test_replay.py",
        "tests/regression/test_rope.py",
        "tests/regression/test_upstream.py",
    ]


@pytest.mark.parametrize(
    ("green", "context", "patches", "reason"),
    [
        (None, CONTEXT, PATCHES, "no green run"),
        (GREEN, {**CONTEXT, "env": "e2"}, PATCHES, "env changed"),
        (GREEN, {**CONTEXT, "kit": "k2"}, PATCHES, "kit changed"),
        (GREEN, CONTEXT, {**PATCHES, "0006-config.patch": "d6-edited"}, "not Python"),
        (GREEN, CONTEXT, {**PATCHES, "0007-new.patch": "d7"}, "no coverage"),
    ],
)
def test_full_suite_when_the_record_cannot_answer(
    green: dict | None, context: dict, patches: dict, reason: str
) -> None:
    files = {**FILES, "0007-new.patch": ["vllm_omni/new.py"]}
    selection = suite.select_changed(green, context, patches, files, MODULES)
    assert selection.targets is None and reason in selection.reason, selection.reason


def test_nothing_changed_runs_nothing_and_says_so() -> None:
    selection = suite.select_changed(GREEN, CONTEXT, PATCHES, FILES, MODULES)
    assert (
        selection.targets == []
        and selection.skipped == MODULES
        and "no patch changed" in selection.reason
    )


OUTCOMES = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("setup")

@pytest.fixture
def torn():
    yield
    raise RuntimeError("teardown")

def test_passes(): pass
def test_fails(): assert False
def test_fails_and_tears(torn): assert False
def test_errors_twice(torn, broken): pass
def test_tears(torn): pass
def test_skips(): pytest.skip("no")
"""


def test_each_test_is_counted_once_by_its_outcome(tmp_path: Path) -> None:
    # pytest's junit.xml of a real run: the suite's totals count each error (setup and teardown),
    # not each test.
    (tmp_path / "test_outcomes.py").write_text(OUTCOMES, encoding="utf-8")
    junit = tmp_path / "junit.xml"
    pytest_args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--junitxml={junit}",
        "test_outcomes.py",
    ]
    subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    counts = suite.counts_from_junit(junit.read_text(encoding="utf-8"))
    assert counts == suite.Counts(passed=1, failed=2, errors=2, skipped=1) and not counts.ok


def test_modules_by_file_reads_coverage_contexts(tmp_path: Path) -> None:
    checkout = tmp_path / ".work" / "vllm-omni"
    seen = [
        "tests/regression/test_rope.py::test_a[x]|run",
        "tests/regression/test_replay.py::test_b|setup",
    ]
    report = {
        "files": {
            ".work/vllm-omni/vllm_omni/rope.py": {"contexts": {"3": [""], "7": seen}},
            ".work/vllm-omni/vllm_omni/attn.py": {"contexts": {"1": [""]}},
            "elsewhere/other.py": {
                "contexts": {"1": ["tests/regression/test_rope.py::test_a|run"]}
            },
        }
    }
    assert suite.modules_by_file(json.dumps(report), tmp_path, checkout) == {
        "vllm_omni/rope.py": ["tests/regression/test_replay.py", "tests/regression/test_rope.py"],
        "vllm_omni/attn.py": [],
    }


@pytest.mark.legs
def test_a_carriers_loop_runs_changed_modules_and_keeps_and_rebuilds_the_oracle_cache(
    tmp_path: Path,
) -> None:
    # The loop of a carrier in one copy of the kit (each leg run starts vllm: seconds of CPU
    # apiece): a green full run (computes the pristine oracle; test_leg_mutations' stock control), a
    # one-line edit of patch 0001, refresh, --changed (the oracle from the cache), --changed again
    # (nothing to run), then a run narrowed by pytest arguments on a torn cache.
    kit = leg_kit(tmp_path / "kit")
    shared_env_ready(kit, "stock")
    kit.run("apply", check=True)
    records = kit.root / ".work" / "records"
    root = kit.root / ".work" / "cache" / "oracle-stock"

    def oracle_used(proc: subprocess.CompletedProcess[str], record: str) -> dict[str, str]:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        used = json.loads((records / f"{record}.json").read_text())["pristine_oracle"]
        # the report says it
        assert f"pristine oracle {used['source']} ({used['reason']})" in proc.stdout
        return dict(used)

    first = kit.run("test", "stock", "--changed")
    used = oracle_used(first, "test-stock")
    assert (
        "no green run of this leg recorded yet" in first.stdout
        and "running the full suite" in first.stdout
    )
    full = json.loads((records / "test-stock.json").read_text())
    # measured, tests traced
    assert full["npu_branch_lines_total"] > 0 and full["npu_branch_lines_executed"] > 0
    assert used["source"] == "computed" and used["reason"] == "no cached results yet"
    # test_leg_mutations' stock control: the full suite on the shipped series
    assert_control_passed(kit, "stock")
    cache = oracle_cache.oracle_entry(root, used)  # this thread budget's entry
    assert [p.name for p in root.iterdir()] == [cache.name]

    # a one-line edit of patch 0001's comment, committed as a fixup of its commit (as the kit
    # commits: no hooks)
    rope = kit.checkout / "vllm_omni" / "diffusion" / "layers" / "rope.py"
    text = rope.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if "cos/sin: broadcast over batch and heads" in x)
    rope.write_text(text.replace(line, line + " (edited)"), encoding="utf-8")
    target = git(
        "log", "--format=%H", "--grep=^Kit-Patch: rope-2d-cos-sin$", cwd=kit.checkout
    ).split()[0]
    git("commit", "-q", "-a", "--fixup", target, cwd=kit.checkout)
    kit.run("refresh", check=True)
    changed = kit.run("test", "stock", "--changed")
    assert oracle_used(changed, "test-stock-changed")["source"] == "cache"
    data = json.loads((records / "test-stock-changed.json").read_text())
    assert "tests/regression/test_rope_regression.py" in data["targets"]
    assert "tests/regression/test_stock_leg.py" not in data["targets"]  # it never executes rope.py
    not_run = next(
        line for line in changed.stdout.splitlines() if "not run, as they executed none" in line
    )
    assert "test_stock_leg.py" in not_run
    assert (
        data["npu_branch_lines_executed"] is None and "not measured (--changed)" in changed.stdout
    )
    assert not (records / "test-stock" / "coverage.json").exists()
    # the full record stands
    assert json.loads((records / "test-stock.json").read_text())["full_suite"]

    again = kit.run("test", "stock", "--changed")
    assert again.returncode == 0 and "no patch changed since the last green run" in again.stdout

    results = cache / oracle_cache.ORACLE_RESULTS
    results.write_bytes(results.read_bytes()[:1000])  # a torn write
    narrowed = kit.run("test", "stock", "-k", "test_pristine_results_come_from_the_pristine_tree")
    used = oracle_used(narrowed, "test-stock-narrowed")
    assert used["source"] == "computed" and "corrupt" in used["reason"], used
    # narrowed by pytest arguments: recorded beside the full record, never over it, and no coverage
    # measured (the row says why)
    assert "not measured (pytest arguments)" in narrowed.stdout
    record = json.loads((records / "test-stock-narrowed.json").read_text())
    assert record["full_suite"] is False and record["npu_branch_lines_executed"] is None
    assert json.loads((records / "test-stock.json").read_text())["full_suite"]
    assert not (records / "test-stock" / "coverage.json").exists()
    key = {k: used[k] for k in ("pristine_commit", "env_stamp", "threads")}
    assert oracle_cache.oracle_stale_reason(cache, key) is None
    # The leg recomputes on whatever reason the cache gives and reports it (the torn write above).
    # That an edit of the leg's real oracle makes its cache stale is read from the cache this leg
    # wrote (its real inputs) without another leg run (about 40 s: the leg and the pristine oracle
    # start vllm).
    oracle = kit.root / "tests" / "regression" / "_oracle.py"
    text = oracle.read_text(encoding="utf-8")
    oracle.write_text(text + "\n# the oracle changed\n", encoding="utf-8")
    assert str(oracle_cache.oracle_stale_reason(cache, key)).endswith("_oracle.py changed")
    oracle.write_text(text, encoding="utf-8")
    assert oracle_cache.oracle_stale_reason(cache, key) is None
