"""scripts.mutation.mutate: the AST mutator, the allowlist, the verdict (no leg runs here; nox -s
mutate runs them)."""

import ast
import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts.legs import legenv
from scripts.mutation import mutate
from scripts.mutation.mutate import MutateError, Outcome
from scripts.workspace import Workspace

SOURCE = """\
import itertools


def attend(q, k, cache, lens, device):
    if q.device.type in ("cuda", "npu") and q.shape[0] == 1:
        ids = cache[0, : lens[0]].to(torch.long)
        out = torch_npu.npu_fusion_attention(q, k, k, 2, "TND")
    elif not q.is_cuda:
        out = None
    return out
"""
ADDED = {5, 6, 7}  # the guard, the gather, the kernel call
MUTANTS = mutate.mutants_of("m.py", SOURCE, ADDED)


def test_every_operator_mutates_the_added_lines_only_into_valid_distinct_python_run_in_the_right_legs() -> (
    None
):
    ops = {
        op: [m.description for m in MUTANTS if m.operator == op]
        for op in {m.operator for m in MUTANTS}
    }
    assert set(ops) == set("guard compare boolean constant slice statement swap cast".split())
    assert {m.line for m in MUTANTS} <= ADDED  # lines 1, 8, 9, 10 were not added: never mutated
    assert (
        "q.device.type in ('cuda', 'npu') -> q.device.type not in ('cuda', 'npu')" in ops["guard"]
    )
    assert "drop 'npu' from ('cuda', 'npu')" in ops["guard"]
    assert "q.shape[0] == 1 -> q.shape[0] != 1" in ops["compare"]
    assert "And -> Or" in ops["boolean"]
    assert "upper bound lens[0] -> (lens[0]) + 1" in ops["slice"]
    assert {"drop .to(...)", "add .float() to argument 1 of npu_fusion_attention"} <= set(
        ops["cast"]
    )
    # k, k: no change
    assert "swap arguments 1 and 2 of torch_npu.npu_fusion_attention" not in ops["swap"]
    assert "swap arguments 0 and 1 of torch_npu.npu_fusion_attention" in ops["swap"]
    assert "remove assign statement" in ops["statement"]
    for m in MUTANTS:
        ast.parse(m.text)
        assert m.text != SOURCE
        assert m.source == SOURCE.splitlines()[m.line - 1].strip()
    assert len({m.key for m in MUTANTS}) == len(MUTANTS)
    assert len({m.text for m in MUTANTS}) == len(MUTANTS)
    # Keys name a line by its text (they survive line moves): the second copy's edits are occurrence
    # 2.
    source = "def f(a, b):\n    if a:\n        g(a, b)\n    else:\n        g(a, b)\n"
    mutants = mutate.mutants_of("m.py", source, {3, 5})
    assert len({m.key for m in mutants}) == len(mutants)
    swaps = [(m.line, m.description) for m in mutants if m.operator == "swap"]
    assert swaps == [
        (3, "swap arguments 0 and 1 of g"),
        (5, "swap arguments 0 and 1 of g (occurrence 2)"),
    ]
    flip = next(m for m in MUTANTS if m.description == "drop .to(...)")
    changed = [
        (a, b) for a, b in zip(SOURCE.splitlines(), flip.text.splitlines(), strict=True) if a != b
    ]
    assert changed == [
        ("        ids = cache[0, : lens[0]].to(torch.long)", "        ids = (cache[0, :lens[0]])")
    ]
    # npu-only lines run in the npu leg, guards and shared lines in both, on their file's tests
    guard = next(m for m in MUTANTS if m.operator == "guard")
    inside = next(m for m in MUTANTS if m.line == 6)
    assert mutate.legs_for(inside, npu_only={6, 7}) == ["npu"]
    assert mutate.legs_for(inside, npu_only=set()) == ["npu", "stock"]
    assert mutate.legs_for(guard, npu_only={5, 6, 7}) == ["npu", "stock"]
    assert mutate.tests_for("vllm_omni/other.py") == ["tests/regression"]
    # the series' own upstream-style tests first (cheap, and what upstream will run), then the kit's
    # deeper suite
    first = mutate.tests_for("vllm_omni/diffusion/layers/rope.py")[:2]
    assert first == [
        "tests/regression/test_series_upstream_tests.py",
        "tests/regression/test_rope_regression.py",
    ]


def test_allowlist_needs_a_reason(tmp_path: Path) -> None:
    toml, entry = (
        tmp_path / "eq.toml",
        '[[equivalent]]\nfile = "m.py"\nline = "x = 1"\nmutation = "1 -> 2"\n',
    )
    toml.write_text(entry + 'reason = "never read"\n')
    assert mutate.load_equivalent(toml) == {"m.py | x = 1 | 1 -> 2": "never read"}
    for text, error in [
        (entry + 'reason = " "\n', "entry 1 lacks reason"),
        ("[[equivalent]\n", "not valid TOML"),
    ]:
        toml.write_text(text)
        with pytest.raises(MutateError, match=error):
            mutate.load_equivalent(toml)
    assert mutate.load_equivalent(tmp_path / "absent.toml") == {}


def outcome(status: str, operator: str = "compare") -> Outcome:
    return Outcome(f"k-{status}", "m.py", 1, operator, "d", status, ("npu",), "", 1.0)


def test_an_unlisted_survivor_fails_the_run_the_summary_counts_per_operator_and_names_the_first_failure() -> (
    None
):
    clean = [outcome("killed"), outcome("equivalent"), outcome("timeout", "slice")]
    assert mutate.record(clean, [], 1.0, "digest", total=3)["passed"] is True
    assert mutate.score(clean) == 1.0
    survived = [*clean, outcome("survived")]
    data = mutate.record(survived, [], 1.0, "digest", total=4)
    assert data["passed"] is False and data["survivors"] == ["k-survived"]
    assert mutate.score(survived) == pytest.approx(2 / 3)
    assert mutate.record(clean, ["stale key"], 1.0, "digest", total=3)["passed"] is False
    assert mutate.record(clean, [], 1.0, "digest", total=5)["passed"] is False  # unfinished
    # nothing judged is no score: not 100 % of nothing, and no pass
    for nothing in ([], [outcome("equivalent")]):
        assert mutate.score(nothing) is None
        data = mutate.record(nothing, [], 1.0, "digest", total=len(nothing))
        assert data["score"] is None and data["passed"] is False
    with pytest.raises(MutateError, match="no mutant to run"):
        mutate.run_all(Path("/nonexistent"), [], {}, [], Path("/nonexistent"), {}, "d", 0.0)
    rows = mutate.summary_rows(
        [outcome("killed"), outcome("survived"), outcome("timeout", "slice")]
    )
    # a row per operator, even with 0 mutants
    assert [row[0] for row in rows] == [*mutate.OPERATORS, "total"]
    by_op = {row[0]: row[1:] for row in rows}
    assert by_op["compare"] == (2, 1, 1, 0, 0) and by_op["slice"] == (1, 0, 0, 0, 1)
    assert by_op["total"] == (3, 1, 1, 0, 1) and by_op["keyword"] == (0, 0, 0, 0, 0)
    output = (
        "....F\nFAILED tests/regression/test_x.py::test_y[bf16] - AssertionError: no\n1 failed\n"
    )
    assert mutate.first_failure(output) == "tests/regression/test_x.py::test_y[bf16]"
    assert mutate.first_failure("collection error\n") == "collection error"


KINDS_SOURCE = """\
def attend(query: torch.Tensor, cache: torch.Tensor, lens: torch.Tensor, block: int):
    kv_lens = lens.tolist()
    q_ends = [query.shape[0]] if len(kv_lens) == 1 else kv_lens
    n_blocks = (int(kv_lens[0]) + block - 1) // block
    keys = cache.index_select(0, lens)
    out = kernel(query, keys, query.shape[1], scale=2.0, actual_seq_qlen=q_ends, actual_seq_kvlen=kv_lens)
    return out, n_blocks
"""
KINDS = mutate.mutants_of("m.py", KINDS_SOURCE, {2, 3, 4, 5, 6, 7})


def kinds_mutants(operator: str, line: int) -> list[str]:
    return [m.description for m in KINDS if m.operator == operator and m.line == line]


# each side of the expression
NEW_OPERATORS = {  # operator: (line of KINDS_SOURCE, its mutants there)
    "conditional": (3, ["always [query.shape[0]]", "always kv_lens"]),
    "arithmetic": (4, ["+ -> -", "- -> +", "// -> /"]),
    "keyword": (
        6,
        [
            "drop actual_seq_kvlen= from kernel",
            "drop actual_seq_qlen= from kernel",
            "drop scale= from kernel",
        ],
    ),
    "return": (7, ["return None", "swap the first two returned values"]),
}


@pytest.mark.parametrize("operator", NEW_OPERATORS)
def test_each_new_operator_mutates_its_line(operator: str) -> None:
    line, descriptions = NEW_OPERATORS[operator]
    assert kinds_mutants(operator, line) == descriptions


def test_name_kinds_come_from_annotations_and_assignments_and_names_swap_within_their_kind_and_statement() -> (
    None
):
    function = ast.parse(KINDS_SOURCE).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert mutate.name_kinds(function) == {
        "query": "tensor",
        "cache": "tensor",
        "lens": "tensor",
        "keys": "tensor",
        "block": "int",
        "n_blocks": "int",
        "kv_lens": "list",
        "q_ends": "list",
    }
    # ``out`` is what an unknown call returns: no kind. A name bound to two kinds has none either.
    twice = ast.parse("def f(a: int):\n    b = a.tolist()\n    b = int(a)\n    c = b\n").body[0]
    assert isinstance(twice, ast.FunctionDef)
    assert mutate.name_kinds(twice) == {"a": "int"}
    names = kinds_mutants("name", 6)
    # Two host lists of one call swap; a tensor whose .shape is read is swapped with every tensor in
    # scope.
    assert {"kv_lens -> q_ends", "q_ends -> kv_lens"} <= set(names)
    assert {"query -> cache", "query -> keys", "query -> lens"} <= {n.split(" (")[0] for n in names}
    # other kinds
    assert not any(n.startswith(("kv_lens -> query", "block", "n_blocks")) for n in names)
    assert kinds_mutants("name", 4) == []  # one name of each kind there: nothing to mistake it for


def test_new_operators_mutate_the_added_lines_only_rewrite_them_and_are_selected() -> None:
    mutants = mutate.mutants_of("m.py", KINDS_SOURCE, {3})
    assert {m.line for m in mutants} == {3}
    assert {m.operator for m in mutants} >= {"conditional", "name"}
    assert not [m for m in mutants if m.operator in ("arithmetic", "keyword", "return")]
    texts = {m.description: m.text for m in KINDS}
    dropped = texts["drop scale= from kernel"]
    assert (
        "kernel(query, keys, query.shape[1], actual_seq_qlen=q_ends, actual_seq_kvlen=kv_lens)"
        in dropped
    )
    assert (
        texts["swap the first two returned values"].splitlines()[6] == "    return (n_blocks, out)"
    )
    source = "def f(a: int, b: int):\n    return a / b * 2\n"
    ops = {
        m.description for m in mutate.mutants_of("m.py", source, {2}) if m.operator == "arithmetic"
    }
    assert ops == {"/ -> //", "/ -> *", "* -> /"}
    assert not [
        m
        for m in mutate.mutants_of("m.py", "def f():\n    return None\n", {2})
        if m.operator == "return"
    ]
    assert mutate.select(KINDS, [], []) == KINDS
    chosen = mutate.select(KINDS, ["kv_lens -> q_ends", "drop scale="], [])
    assert {m.description.split(" (")[0] for m in chosen} == {
        "kv_lens -> q_ends",
        "drop scale= from kernel",
    }
    assert {m.operator for m in mutate.select(KINDS, [], ["return", "keyword"])} == {
        "return",
        "keyword",
    }
    assert mutate.select(KINDS, ["drop scale="], ["return"]) == []  # both filters hold


@pytest.mark.legs
def test_closing_a_busy_worker_leaves_no_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # An interrupted mutate closes its workers while one still runs a mutant's tests: the worker and
    # its forked pytest run must both go, at once and quietly (the kit prints its one line).
    python = legenv.ensure_env(Workspace(KIT_ROOT), "stock")
    suite = tmp_path / "tests" / "regression"
    suite.mkdir(parents=True)
    shutil.copy(KIT_ROOT / "tests" / "regression" / "_mutant_worker.py", suite)
    # written only by a run that was let finish: close() must stop it instead
    finished = tmp_path / "finished"
    (tmp_path / "test_slow.py").write_text(
        f"import time\n\n\ndef test_slow():\n    time.sleep(300)\n    open({str(finished)!r}, "
        "'w')\n"
    )
    worker = mutate.Worker("stock", python, {**os.environ, "KIT_NPU_MODE": "none"}, tmp_path)
    assert worker.proc.stdin is not None
    worker.proc.stdin.write(
        json.dumps({"args": [str(tmp_path / "test_slow.py"), "-q"], "timeout": 600}) + "\n"
    )
    worker.proc.stdin.flush()
    listing = Path(f"/proc/{worker.proc.pid}/task/{worker.proc.pid}/children")
    for _ in range(200):  # the fork appears within a few seconds
        if children := [int(pid) for pid in listing.read_text().split()]:
            break
        time.sleep(0.05)
    assert children, "the worker never started the pytest run"
    try:
        worker.close()
    except BaseException:  # a failing close() must not leave this test's processes behind
        for pid in [*children, worker.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.proc.wait()
        raise
    assert worker.proc.returncode is not None and not finished.exists()
    for pid in children:
        assert not Path(f"/proc/{pid}").exists(), f"pytest run {pid} outlived its worker"
    assert "Traceback" not in capfd.readouterr().err


def test_series_tests_mode_takes_the_npu_branch_lines_and_the_series_tests_that_import_their_module(
    tmp_path: Path,
) -> None:
    source = 'def f(q):\n    n = q.shape[0] + 1\n    if q.device.type == "npu":\n        return n * 2\n    return n\n'
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    chosen = mutate.npu_branch(mutate.mutants_of("m.py", source, {2, 3, 4}), tmp_path)
    # not line 2: shared
    assert {m.line for m in chosen} == {3, 4} and any(m.device_guard for m in chosen)
    tests = {"tests/a/test_x.py": "from pkg.sub import m\n", "tests/test_y.py": "import other\n"}
    ids = mutate.tests_for("pkg/sub/m.py", tests)
    assert ids == [
        f"tests/regression/{mutate.SERIES_TESTS}::test_series_upstream_test_passes_from_checkout[tests/a/test_x.py]"
    ]
    # none: all
    assert mutate.tests_for("pkg/none.py", tests) == [f"tests/regression/{mutate.SERIES_TESTS}"]


def test_series_tests_mode_runs_every_mutant_in_the_stock_leg_and_counts_lines_a_kill_shows_run(
    tmp_path: Path,
) -> None:
    killed = Outcome("k", "m.py", 4, "constant", "2 -> 3", "killed", ("stock",), "t", 1.0)
    survived = Outcome("s", "m.py", 5, "constant", "1 -> 2", "survived", ("stock",), "", 1.0)
    data = mutate.record([killed, survived], [], 2.0, "d" * 64, 2, series_only=True)
    assert (data["lines"], data["lines_run"], data["lines_not_shown_run"]) == (2, 1, ["m.py:5"])
    assert data["scope"] == "npu-branch" and not data["passed"]

    class Leg:
        def __init__(self) -> None:
            self.runs: list[list[str]] = []

        def run(self, tests: list[str], timeout: float) -> tuple[str, str]:
            self.runs.append(tests)
            return "failed", "x"

    stock = Leg()
    npu_only_line = mutate.Mutant("m.py", 1, "constant", "1 -> 2", "x = 1", "x = 2\n")
    (tmp_path / "m.py").write_text("x = 1\n", encoding="utf-8")
    outcome = mutate.run_mutant(npu_only_line, tmp_path, {"stock": stock}, {1}, 60, {})  # type: ignore[dict-item]
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == "x = 1\n"  # the file is put back
    assert outcome.status == "killed" and outcome.legs == ("stock",) and stock.runs


def test_series_tests_mode_keeps_only_kills_made_on_the_same_series() -> None:
    killed = Outcome("k", "m.py", 4, "constant", "2 -> 3", "killed", ("stock",), "t", 1.0)
    survived = Outcome("s", "m.py", 5, "constant", "1 -> 2", "survived", ("stock",), "", 1.0)
    data = json.loads(
        json.dumps(mutate.record([killed, survived], [], 2.0, "d" * 64, 2, series_only=True))
    )
    assert mutate.kills_to_keep(data, "d" * 64) == {"k": killed}  # the survivor runs again
    # another series: its code or its tests changed
    assert mutate.kills_to_keep(data, "e" * 64) == {}
    full = json.loads(json.dumps(mutate.record([killed], [], 1.0, "d" * 64, 1)))
    assert mutate.kills_to_keep(full, "d" * 64) == {} and mutate.kills_to_keep(None, "d" * 64) == {}
