"""Upstream's gates in the kit: its pre-commit hooks on what the series adds, named by hook id, and the
off-NPU proof (KIT007), each shown to bite on a deliberately broken patch."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import KIT_ROOT, SPDX, Kit, lint, make_series

from scripts.checks import hooks
from scripts.checks.offnpu import off_npu_changes
from scripts.checks.proof import Declared, OffNpuProof, declarations, judge_off_npu

HOOKS = KIT_ROOT / "ci" / "upstream-hooks.toml"
# (case, file edits of one patch, the finding upstream's hook reports, as the lint prints it)
HOOK_BITES = [
    (
        "typo",
        {
            "vllm_omni/attn.py": SPDX
            + "# the mis-broadcast of tables\n\n\ndef attend(q):\n    return q\n"
        },
        "vllm_omni/attn.py:3: typos `mis` should be",
    ),
    (
        "trailing whitespace",
        {"notes/npu.md": "# NPU\n\nRun it here.  \nAnd here. \n"},
        "notes/npu.md:4: trailing-whitespace",
    ),
    (
        "no final newline",
        {"tests/npu.yaml": "stages:\n  - devices: 0"},
        "tests/npu.yaml:2: end-of-file-fixer",
    ),
    (
        "CRLF among LF",
        {"notes/npu.txt": "one\r\ntwo\nthree\n"},
        "notes/npu.txt:1: mixed-line-ending",
    ),
    ("bad YAML", {"tests/npu.yaml": "stages: [1\n"}, "tests/npu.yaml:2: check-yaml"),
    (
        "debug statement",
        {"vllm_omni/attn.py": "def attend(q):\n    breakpoint()\n    return q\n"},
        "vllm_omni/attn.py:2: debug-statements",
    ),
    (
        "ruff with upstream's settings",
        {"vllm_omni/attn.py": SPDX + "import os\n" + "X = " + '"' + "a" * 130 + '"\n'},
        "vllm_omni/attn.py:4: ruff-check E501",
    ),
    (
        "ruff unused import",
        {"vllm_omni/attn.py": SPDX + "import os\n"},
        "vllm_omni/attn.py:3: ruff-check F401",
    ),
]


@pytest.mark.parametrize(("case", "edits", "said"), HOOK_BITES, ids=[c[0] for c in HOOK_BITES])
def test_each_hook_fails_an_added_line_under_its_upstream_id(
    small_kit: Kit, case, edits, said
) -> None:
    make_series(small_kit, [(edits, f"[NPU] {case}", "bad")])
    before = {p: (small_kit.checkout / p).read_bytes() for p in edits}
    code, out = lint(small_kit)
    assert code == 1 and said in out and "Traceback" not in out, out
    assert {
        p: (small_kit.checkout / p).read_bytes() for p in edits
    } == before  # fixers ran on a scratch copy


def test_every_hook_of_upstreams_config_is_listed_and_its_gate_counts_what_the_series_adds(
    tmp_path: Path,
) -> None:
    table = hooks.load_hooks(HOOKS)
    assert [h.id for h in table] == [
        "check-yaml",
        "debug-statements",
        "end-of-file-fixer",
        "mixed-line-ending",
        "trailing-whitespace",
        "ruff-check",
        "ruff-format",
        "typos",
        "actionlint",
        "signoff-commit",
        "check-test-ci-coverage",
        "check-tts-adapter-migration",
        "check-forbidden-imports",
        "suggestion",
    ]
    assert all(h.why for h in table if h.run == "no") and all(
        h.package for h in table if h.run != "no"
    )
    assert hooks.packages(table) == ["pre-commit-hooks==6.0.0", "ruff==0.14.10", "typos==1.40.1"]
    # A trailing blank on upstream's own line is upstream's: pre-existing, not counted.
    (tmp_path / "vllm_omni").mkdir()
    (tmp_path / "vllm_omni/a.py").write_text("x = 1  \ny = 2  \n")
    trailing = [h for h in table if h.id == "trailing-whitespace"]
    gate = hooks.run_gate(
        trailing, tmp_path, {"vllm_omni/a.py": {2}}, set(), hooks.Bins(None), KIT_ROOT / "ci"
    )
    assert [(f.file, f.line) for f in gate.counted] == [("vllm_omni/a.py", 2)]
    assert [(f.file, f.line) for f in gate.pre_existing] == [("vllm_omni/a.py", 1)]
    assert (tmp_path / "vllm_omni/a.py").read_text() == "x = 1  \ny = 2  \n"  # never fixed in place
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/npu.yml").write_text("on: push\n")
    unrunnable = [h for h in table if h.run == "no"]
    gate = hooks.run_gate(
        unrunnable,
        tmp_path,
        {".github/workflows/npu.yml": {1}},
        set(),
        hooks.Bins(None),
        KIT_ROOT / "ci",
    )
    assert [(f.hook, f.file) for f in gate.counted] == [("actionlint", ".github/workflows/npu.yml")]
    assert gate.counted[0].message.startswith("unchecked: upstream pins actionlint v1.7.7")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[hook]]\nid = 'x'\nrepo = 'local'\nrun = 'sometimes'\n", "hook x has run = 'sometimes'"),
        (
            "[[hook]]\nid = 'x'\nrepo = 'local'\nrun = 'checker'\n",
            "fixer and checker need entry and package",
        ),
        ("[[hook]]\nid = 'x'\nrun = 'no'\n", "is malformed"),
        ("[[hook]\n", "is malformed"),
    ],
)
def test_a_malformed_hook_table_is_one_line(text: str, said: str) -> None:
    with pytest.raises(hooks.HooksError) as err:
        hooks.parse_hooks(text)
    assert said in f"{err.value.what} -- {err.value.fix}"


def test_located_output_of_a_file_named_with_a_space_and_no_line() -> None:
    out = "other.py:1: no\na b.py - Could not parse ast\n"
    assert hooks.located(out, ["a b.py"]) == [("a b.py", 1, "a b.py - Could not parse ast", True)]
    assert hooks.message("a b.py - Could not parse ast", "a b.py", 1) == "Could not parse ast"


# ---- KIT007: the off-NPU proof ----
PRISTINE = '''\
import torch


def _gather(k, ids):
    """Upstream's helper."""
    return k.index_select(0, ids)


def attend(q, k, ids, rocm=False):
    if not q.is_cuda:
        return reference(q, k)
    if rocm:
        out = rocm_attention(q, k)
    else:
        out = flash(q, _gather(k, ids))
    return out


def to_device(t, device):
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def replay(q):
    if q.is_cuda and q.shape[0] == 1:
        return paged(q)
    return dense(q)


def pick(q):
    if not q.is_cuda:
        kernel = "reference"
    else:
        kernel = "flash"
    return kernel
'''

NPU_ONLY = '''\
import itertools

import torch

_NPU_CACHE = {}


def _gather(k, ids):
    """Upstream's helper (also for the NPU branch)."""
    return k.index_select(0, ids)


def _npu_attention(q, k, ids):
    import torch_npu

    lens = list(itertools.accumulate([q.shape[0]]))
    _NPU_CACHE[q.device] = lens
    return torch_npu.npu_fusion_attention(q, _gather(k, ids), k, q.shape[1], "TND", actual_seq_qlen=lens)[0]


def attend(q, k, ids, rocm=False):
    if q.device.type == "npu":
        return _npu_attention(q, k, ids)
    if not q.is_cuda:
        return reference(q, k)
    if rocm:
        out = rocm_attention(q, k)
    else:
        out = flash(q, _gather(k, ids))  # comments never count
    return out


def to_device(t, device):
    if torch.device(device).type not in ("cuda", "npu"):
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def replay(q):
    if (q.is_cuda or q.device.type == "npu") and q.shape[0] == 1:
        return paged(q)
    if q.device.type != "npu":
        return dense(q)
    return dense(q.float()).to(q.dtype)


def pick(q):
    if q.device.type == "npu":
        kernel = "fused"
    elif not q.is_cuda:
        kernel = "reference"
    else:
        kernel = "flash"
    return kernel
'''


def test_what_changes_nothing_off_npu() -> None:
    # Guards by device.type (==, != with an early return, if/elif, `in`, `or`), NPU-only helper,
    # cache and import, docstrings and comments: off NPU this is upstream's module, function by
    # function.
    assert off_npu_changes("vllm_omni/a.py", PRISTINE, NPU_ONLY) == []
    later = NPU_ONLY.replace("lens = list(", "lens = tuple(")  # a later patch to an NPU-only helper
    assert off_npu_changes("vllm_omni/a.py", NPU_ONLY, later) == []
    cpu_edit = NPU_ONLY.replace("        return dense(q)\n", "        return q\n")
    assert off_npu_changes(
        "vllm_omni/a.py", NPU_ONLY, cpu_edit
    )  # while its CPU code is still judged
    reformatted = PRISTINE.replace('"""Upstream\'s helper."""', '"""Another docstring."""').replace(
        "return t.to(device)", "return t.to(\n            device\n        )  # same call"
    )
    assert (
        off_npu_changes("vllm_omni/a.py", PRISTINE, reformatted) == []
    )  # formatting and docstrings alone
    assert (
        off_npu_changes("vllm_omni/a.py", PRISTINE, "def broken(:\n") == []
    )  # does not parse: left to ruff


# (case, the edit of PRISTINE, the unit and the first differing statement KIT007 names)
OFF_NPU_BITES = [
    (
        "a CUDA-only branch",
        ("out = flash(q, _gather(k, ids))", "out = flash(q, _gather(k, ids).contiguous())"),
        "attend",
        "out = flash(q, _gather(k, ids).contiguous())",
    ),
    (
        "a ROCm-only branch",
        ("out = rocm_attention(q, k)", "out = rocm_attention(q.float(), k)"),
        "attend",
        "out = rocm_attention(q.float(), k)",
    ),
    (
        "CPU code beside an NPU guard",
        (
            "    if not q.is_cuda:\n        return reference(q, k)",
            '    if q.device.type == "npu":\n        return None\n'
            "    if not q.is_cuda:\n        return reference(q.float(), k)",
        ),
        "attend",
        "return reference(q.float(), k)",
    ),
    (
        "a guard on another device than NPU",
        ('!= "cuda"', 'not in ("cuda", "xpu")'),
        "to_device",
        "if torch.device(device).type not in ('cuda', 'xpu'):",
    ),
    (
        "upstream's helper changed",
        ("return k.index_select(0, ids)", "return k[ids]"),
        "_gather",
        "return k[ids]",
    ),
    (
        "CUDA code moved into a new helper",
        ("        out = flash(q, _gather(k, ids))\n", "        out = _cuda(q, k, ids)\n"),
        "attend",
        "out = _cuda(q, k, ids)",
    ),
    (
        "a new function every device can call",
        ("def replay(q):", "def extra():\n    return 1\n\n\ndef replay(q):"),
        "extra",
        "def extra():",
    ),
    (
        "a condition widened beyond NPU",
        ("if q.is_cuda and q.shape[0] == 1:", "if q.shape[0] == 1:"),
        "replay",
        "if q.shape[0] == 1:",
    ),
]


@pytest.mark.parametrize(
    ("case", "edit", "unit", "statement"), OFF_NPU_BITES, ids=[c[0] for c in OFF_NPU_BITES]
)
def test_an_off_npu_change_is_named_by_function_and_statement(case, edit, unit, statement) -> None:
    assert edit[0] in PRISTINE
    changes = off_npu_changes("vllm_omni/a.py", PRISTINE, PRISTINE.replace(*edit))
    assert [(c.unit, c.statement) for c in changes][:1] == [(unit, statement)], changes


def test_declarations_cover_their_change_a_stale_one_is_a_finding_and_the_pr_says_so() -> None:
    gathered = PRISTINE.replace("return k.index_select(0, ids)", "return k[ids]")
    changes = off_npu_changes("vllm_omni/a.py", PRISTINE, gathered)
    message = (
        "S\n\nBody.\n\nUpstream-Status: Pending\nKit-Patch: x\n"
        "Kit-Off-NPU: vllm_omni/a.py::_gather: indexing is faster here\n"
    )
    claims = declarations("0001-x.patch", message)
    assert claims == {("vllm_omni/a.py", "_gather"): "indexing is faster here"}
    declared = Declared("0001-x.patch", "vllm_omni/a.py", "_gather", "indexing is faster here")
    assert judge_off_npu("0001-x.patch", changes, claims) == ([], [declared])
    other_file = {
        ("vllm_omni/b.py", "_gather"): "why"
    }  # the same name in another file covers nothing here
    assert [f.rule for f in judge_off_npu("0001-x.patch", changes, other_file)[0]] == [
        "KIT007",
        "KIT007",
    ]
    findings, _ = judge_off_npu("0001-x.patch", [], {("vllm_omni/a.py", "attend"): "why"})
    stale = "declares Kit-Off-NPU: vllm_omni/a.py::attend, but off NPU attend is unchanged by this patch"
    assert [f.message for f in findings] == [stale]
    said = OffNpuProof(
        [], [Declared("0001-x.patch", "vllm_omni/a.py", "_gather", "the fix")]
    ).claim()
    assert said.startswith(
        "Off NPU nothing changes except, on purpose: `_gather` (vllm_omni/a.py): the fix."
    )


def test_lint_names_the_undeclared_change_and_its_patch_and_a_missing_hook_program(
    small_kit: Kit, tmp_path
) -> None:
    make_series(
        small_kit,
        [({"vllm_omni/attn.py": "def attend(q):\n    return q.float()\n"}, "[NPU] x", "sneaky")],
    )
    code, out = lint(small_kit, "--hooks-bin", str(tmp_path))
    assert (
        code == 2 and "was not found in" in out and "nox -s lint" in out and "Traceback" not in out
    )
    code, out = lint(small_kit)
    said = "vllm_omni/attn.py:2: KIT007 off NPU, attend differs from upstream (`return q.float()`) and 0001-sneaky"
    assert code == 1 and said + ".patch does not declare it" in out
    assert "Off NPU: NOT proven (1 undeclared difference(s)" in out
