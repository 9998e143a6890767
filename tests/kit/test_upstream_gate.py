"""Upstream's gates in the kit: its pre-commit hooks on what the series adds, named by hook id, and the
off-NPU proof (KIT007), each shown to bite on a deliberately broken patch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import AUTHOR, KIT_ROOT, SPDX, Kit, commit_patch, lint, make_series

from scripts.checkout import PRISTINE_TAG
from scripts.checks import precommit
from scripts.checks.lint import tools_for
from scripts.checks.offnpu import off_npu_changes
from scripts.checks.proof import Declared, OffNpuProof, declarations, judge_off_npu
from scripts.checks.rules import added_line_set
from scripts.gitcmd import git
from scripts.workspace import Workspace

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
        "vllm_omni/attn.py:3: ruff-check ruff-check would change this line",
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
    # fixers ran on a scratch copy
    assert {p: (small_kit.checkout / p).read_bytes() for p in edits} == before


def test_the_release_config_is_upstreams_hooks_and_its_gate_counts_what_the_series_adds(
    small_kit: Kit,
) -> None:
    config = yaml.safe_load((KIT_ROOT / "ci" / precommit.RELEASE_CONFIG).read_text("utf-8"))
    ids = [h["id"] for repo in config["repos"] for h in repo["hooks"]]
    assert ids == [
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
        "check-tts-adapter-migration",
    ]
    # A trailing blank on upstream's own line is upstream's: pre-existing, not counted; a workflow
    # the series adds is unchecked (actionlint at upstream's pin is not on the registry).
    upstream_line = "x = 1  \n"
    small_kit.run("apply", check=True)
    (small_kit.checkout / "vllm_omni/a.py").write_text(upstream_line, encoding="utf-8")
    git("add", "-A", cwd=small_kit.checkout)
    git("commit", "-q", "--amend", "--no-edit", cwd=small_kit.checkout, env=AUTHOR)
    git("tag", "-f", PRISTINE_TAG, cwd=small_kit.checkout)
    commit_patch(
        small_kit.checkout,
        {"vllm_omni/a.py": upstream_line + "y = 2  \n", ".github/workflows/npu.yml": "on: push\n"},
        "[NPU] x",
        "x",
    )
    tools = tools_for(Workspace(small_kit.root))
    diff = git("diff", PRISTINE_TAG, "HEAD", cwd=small_kit.checkout)
    gate = precommit.run_gates(
        tools.pre_commit,
        precommit.release_gates(tools.ci_dir),
        tools.table,
        small_kit.checkout,
        added_line_set(diff),
        {".github/workflows/npu.yml"},
    )
    counted = {(f.hook, f.file, f.line) for f in gate.counted}
    assert ("trailing-whitespace", "vllm_omni/a.py", 2) in counted, gate
    assert [(f.hook, f.file, f.line) for f in gate.pre_existing] == [
        ("trailing-whitespace", "vllm_omni/a.py", 1)
    ]
    (unchecked,) = [f for f in gate.counted if f.hook == "actionlint"]
    assert unchecked.message.startswith("unchecked: https://github.com/rhysd/actionlint at v1.7.7")
    rows = {row[0]: row for row in gate.rows}
    assert rows["check-test-ci-coverage"][2].endswith("(stand-in: KIT004)"), gate.rows
    assert rows["signoff-commit"][2] == "not run by `pre-commit run` (another stage)"
    assert (small_kit.checkout / "vllm_omni/a.py").read_text() == upstream_line + "y = 2  \n"


def test_a_malformed_hook_table_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text("[[repository]]\nurl = 'x'\n", encoding="utf-8")
    with pytest.raises(precommit.GateError) as err:
        precommit.load_table(tmp_path / "t.toml")
    assert "is malformed" in err.value.what and "restore it from git" in err.value.fix


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
    # while its CPU code is still judged
    assert off_npu_changes("vllm_omni/a.py", NPU_ONLY, cpu_edit)
    reformatted = PRISTINE.replace('"""Upstream\'s helper."""', '"""Another docstring."""').replace(
        "return t.to(device)", "return t.to(\n            device\n        )  # same call"
    )
    # formatting and docstrings alone
    assert off_npu_changes("vllm_omni/a.py", PRISTINE, reformatted) == []
    # does not parse: left to ruff
    assert off_npu_changes("vllm_omni/a.py", PRISTINE, "def broken(:\n") == []


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
    # the same name in another file covers nothing here
    other_file = {("vllm_omni/b.py", "_gather"): "why"}
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


def test_lint_names_the_undeclared_change_and_its_patch(small_kit: Kit) -> None:
    make_series(
        small_kit,
        [({"vllm_omni/attn.py": "def attend(q):\n    return q.float()\n"}, "[NPU] x", "sneaky")],
    )
    code, out = lint(small_kit)
    said = "vllm_omni/attn.py:2: KIT007 off NPU, attend differs from upstream (`return q.float()`) and 0001-sneaky"
    assert code == 1 and said + ".patch does not declare it" in out
    assert "Off NPU: NOT proven (1 undeclared difference(s)" in out
