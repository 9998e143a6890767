"""KIT007 is sound: whatever a patch makes run off NPU that upstream does not run is a finding.

Each case is a real series on a small upstream whose module has the shapes the real series touches
(a dataclass context, a property, a tensor-annotated function, a torch.device parameter), linted by
the CLI. A bad case must be named by file, function and statement; its twin (the total form the
series uses) is clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import AUTHOR, SMALL_UPSTREAM, SPDX, Kit, clone, lint, pinned_kit

from scripts.checks.offnpu import off_npu_changes
from scripts.checks.rules import check_file
from scripts.diffparse import parse
from scripts.gitcmd import git

CTX = "vllm_omni/ctx.py"
OTHER = "vllm_omni/other.py"
PRISTINE = """\
from dataclasses import dataclass

import torch


@dataclass
class Context:
    staging: bool = False
    block_table: torch.Tensor | None = None

    @property
    def pool(self):
        return self.block_table

    def stage(self, i):
        if not self.staging:
            return None, None
        return self.block_table[i]


def reference(q, k):
    return q


def attend(q: torch.Tensor, k, mask=None):
    return reference(q, k)


def replay(q):
    if q.is_cuda and q.shape[0] == 1:
        return reference(q, q)
    return q


def copy(t, device: torch.device):
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def rotate_half(x):
    return x
"""
# upstream's files carry either project's header; a module moved keeps its own
ROTATE = (
    "# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors to "
    "the vLLM project\n\n\n"
    "def rotate_half(x):\n    return x\n"
)
UPSTREAM = {**SMALL_UPSTREAM, CTX: PRISTINE, OTHER: ROTATE}

STAGE = "        if not self.staging:\n            return None, None\n"
ATTEND = "def attend(q: torch.Tensor, k, mask=None):\n"
REPLAY = "    if q.is_cuda and q.shape[0] == 1:\n        return reference(q, q)\n"
COPY = '    if torch.device(device).type != "cuda":\n'


def npu_return(condition: str, indent: str, value: str = "None, None") -> str:
    return f"{indent}if {condition}:\n{indent}    return {value}\n"


# (case, (old, new) edit of PRISTINE, the unit and the statement KIT007 names); each a member of the
# class
BAD = [
    (
        "a field that may be None",
        (
            STAGE,
            STAGE.replace(
                "            return None, None\n",
                npu_return('self.block_table.device.type == "npu"', "            ")
                + "            return None, None\n",
            ),
        ),
        "Context.stage",
        "if self.block_table.device.type == 'npu':",
    ),
    (
        "an index",
        (STAGE, npu_return('self.block_table[i].device.type == "npu"', "        ") + STAGE),
        "Context.stage",
        "if self.block_table[i].device.type == 'npu':",
    ),
    (
        "a call",
        (ATTEND, ATTEND + npu_return('q.float().device.type == "npu"', "    ", "q")),
        "attend",
        "if q.float().device.type == 'npu':",
    ),
    (
        "a property",
        (STAGE, npu_return('self.pool.device.type == "npu"', "        ") + STAGE),
        "Context.stage",
        "if self.pool.device.type == 'npu':",
    ),
    (
        "a parameter that may be None",
        (ATTEND, ATTEND + npu_return('mask.device.type == "npu"', "    ", "q")),
        "attend",
        "if mask.device.type == 'npu':",
    ),
    (
        "a name bound only later",
        (ATTEND, ATTEND + npu_return('out.device.type == "npu"', "    ", "out") + "    out = q\n"),
        "attend",
        "if out.device.type == 'npu':",
    ),
    (
        "a condition beside the test",
        (ATTEND, ATTEND + npu_return('k.ready() and q.device.type == "npu"', "    ", "q")),
        "attend",
        "if k.ready() and q.device.type == 'npu':",
    ),
    (
        "an allocation at import, used only on NPU",
        ("def reference(", "_NPU_WORKSPACE = torch.empty(1 << 28)\n\n\ndef reference("),
        "<module>",
        "_NPU_WORKSPACE = torch.empty(1 << 28)",
    ),
    (
        "a default value made at def time, used only on NPU",
        (
            "def reference(",
            "def _npu_attend(q, workspace=torch.empty(1 << 28)):\n    return q\n\n\ndef reference(",
        ),
        "_npu_attend",
        "def _npu_attend(q, workspace=torch.empty(1 << 28)):",
    ),
    (
        "a decorator run at def time, used only on NPU",
        (
            "def reference(",
            "@torch.no_grad()\ndef _npu_attend(q):\n    return q\n\n\ndef reference(",
        ),
        "_npu_attend",
        "@torch.no_grad()",
    ),
]
# The NPU code that uses what the last three cases add (one test each, itself total).
USES = {
    "an allocation at import, used only on NPU": "_NPU_WORKSPACE",
    "a default value made at def time, used only on NPU": "_npu_attend(q)",
    "a decorator run at def time, used only on NPU": "_npu_attend(q)",
}

# The total forms the series uses, all in one module: off NPU this is upstream's module.
GOOD = (
    PRISTINE.replace("from dataclasses", "import itertools\nfrom dataclasses")
    .replace("import torch\n", "import torch\n\n_NPU_CACHE: dict = {}\n")
    .replace(
        STAGE,
        STAGE.replace(
            "            return None, None\n",
            npu_return(
                'self.block_table is not None and self.block_table.device.type == "npu"',
                "            ",
                "_npu_pair(self.block_table)",
            )
            + "            return None, None\n",
        ),
    )
    .replace(
        "def reference(",
        "def _npu_pair(t):\n    return list(itertools.repeat(t, 2)), _NPU_CACHE\n\n\ndef "
        "reference(",
    )
    .replace(ATTEND, ATTEND + npu_return('q.device.type == "npu" and k.ready()', "    ", "q"))
    .replace(REPLAY, REPLAY.replace("q.is_cuda and", '(q.is_cuda or q.device.type == "npu") and'))
    .replace(
        COPY,
        npu_return('torch.device(device).type == "npu"', "    ", "t")
        + COPY.replace('!= "cuda"', 'not in ("cuda", "npu")'),
    )
)


def bad_module(case: str, edit: tuple[str, str]) -> str:
    assert edit[0] in PRISTINE, case
    text = PRISTINE.replace(*edit)
    if case in USES:
        text = text.replace(
            ATTEND, ATTEND + npu_return('q.device.type == "npu"', "    ", USES[case])
        )
    return text


@pytest.fixture(scope="module")
def offnpu_template(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return pinned_kit(tmp_path_factory.mktemp("offnpu-kit"), UPSTREAM)


@pytest.fixture
def offnpu_kit(offnpu_template: Kit, tmp_path: Path) -> Kit:
    return clone(offnpu_template, tmp_path / "kit")


def series(kit: Kit, edits: dict[str, str], *trailers: str) -> None:
    """One patch of edits, its message carrying the given Kit-Off-NPU trailers, refreshed into
    patches/."""
    kit.run("apply", check=True)
    for name, text in edits.items():
        (kit.checkout / name).write_text(text, encoding="utf-8")
    git("add", "-A", cwd=kit.checkout)
    lines = "".join(f"Kit-Off-NPU: {t}\n" for t in trailers)
    message = f"[NPU] Case\n\nWhy.\n\nUpstream-Status: Pending\nKit-Patch: case\n{lines}"
    git("commit", "-q", "-m", message, cwd=kit.checkout, env=AUTHOR)
    kit.run("refresh", check=True)


def kit007(out: str) -> list[str]:
    return [line for line in out.splitlines() if " KIT007 " in line]


@pytest.mark.parametrize(("case", "edit", "unit", "statement"), BAD, ids=[c[0] for c in BAD])
def test_what_runs_off_npu_and_did_not_before_is_named(case, edit, unit, statement) -> None:
    changes = off_npu_changes(CTX, PRISTINE, bad_module(case, edit))
    assert [(c.unit, c.statement) for c in changes] == [(unit, statement)], changes


def test_the_total_forms_the_series_uses_change_nothing_off_npu() -> None:
    assert off_npu_changes(CTX, PRISTINE, GOOD) == []


@pytest.mark.parametrize(
    "case",
    [
        "a field that may be None",
        "a condition beside the test",
        "an allocation at import, used only on NPU",
    ],
)
def test_lint_names_file_function_and_statement(offnpu_kit: Kit, case: str) -> None:
    _, edit, unit, statement = next(row for row in BAD if row[0] == case)
    text = bad_module(case, edit)
    series(offnpu_kit, {CTX: text})
    code, out = lint(offnpu_kit)
    (finding,) = kit007(out)
    line = next(
        n for n, t in enumerate(text.splitlines(), 1) if t.strip() == statement.replace("'", '"')
    )
    assert code == 1 and finding.startswith(
        f"{CTX}:{line}: KIT007 off NPU, {unit} differs from upstream"
    ), out
    assert f"(`{statement}`" in finding and "0001-case.patch does not declare it" in finding, (
        finding
    )
    assert f"'Kit-Off-NPU: {CTX}::{unit}: <why>'" in finding  # the fix names the file and the unit


def test_lint_is_clean_on_the_total_forms(offnpu_kit: Kit) -> None:
    series(offnpu_kit, {CTX: GOOD})
    code, out = lint(offnpu_kit)
    assert (
        code == 0
        and "lint clean" in out
        and "Off NPU (CPU, CUDA, ROCm, XPU) nothing changes" in out
    ), out


def test_a_declaration_covers_its_own_file_only(offnpu_kit: Kit) -> None:
    flipped = PRISTINE.replace(
        "def rotate_half(x):\n    return x\n", "def rotate_half(x):\n    return -x\n"
    )
    declared = f"{CTX}::rotate_half: the sign fix, on every device"
    series(offnpu_kit, {CTX: flipped, OTHER: ROTATE.replace("return x", "return -x")}, declared)
    code, out = lint(offnpu_kit)
    (finding,) = kit007(out)  # the other file's rotate_half: not covered
    assert code == 1 and finding.startswith(f"{OTHER}:6: KIT007 off NPU, rotate_half differs"), out
    # NOT proven: no claim made
    assert f"`rotate_half` ({CTX}): the sign fix, on every device" not in out
    # the flip in ctx.py alone: declared
    (offnpu_kit.checkout / OTHER).write_text(ROTATE, encoding="utf-8")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=offnpu_kit.checkout, env=AUTHOR)
    offnpu_kit.run("refresh", check=True)
    code, out = lint(offnpu_kit)
    assert code == 0 and f"`rotate_half` ({CTX}): the sign fix, on every device" in out, out


def test_a_renamed_module_is_one_finding_and_keeps_its_header(offnpu_kit: Kit) -> None:
    offnpu_kit.run("apply", check=True)
    git("mv", OTHER, "vllm_omni/moved.py", cwd=offnpu_kit.checkout)
    git(
        "commit",
        "-q",
        "-m",
        "[NPU] Move\n\nWhy.\n\nUpstream-Status: Pending\nKit-Patch: move\n",
        cwd=offnpu_kit.checkout,
        env=AUTHOR,
    )
    offnpu_kit.run("refresh", check=True)
    code, out = lint(offnpu_kit)
    (finding,) = kit007(out)  # not one per unit of the module
    assert code == 1 and "vllm_omni/moved.py:1: KIT007 off NPU, <module> differs" in finding, out
    assert (
        f"(`renamed from {OTHER}`: code importing the old module fails on every device)" in finding
    )
    # a moved file keeps its source's header (here vLLM's), not a new file's
    assert " KIT003 " not in out


# (case, the trailers, what the one error line names): each refused, exit 2, patches/ untouched
BAD_DECLARATIONS = [
    ("no file", ["rotate_half: the fix"], "does not name the file and unit it covers"),
    ("no reason", [f"{CTX}::rotate_half: "], "gives no reason"),
    ("no reason, no colon", [f"{CTX}::rotate_half"], "gives no reason"),
    ("twice", [f"{CTX}::rotate_half: one", f"{CTX}::rotate_half: two"], "is declared twice"),
    (
        "a file the patch does not change",
        [f"{OTHER}::rotate_half: why"],
        "names a file 0001-case.patch does not",
    ),
    ("a unit the file does not have", [f"{CTX}::rotate_halves: why"], "has no unit rotate_halves"),
]


@pytest.mark.parametrize(
    ("case", "trailers", "said"), BAD_DECLARATIONS, ids=[c[0] for c in BAD_DECLARATIONS]
)
def test_a_bad_declaration_is_refused_in_one_line(
    offnpu_kit: Kit, case: str, trailers: list[str], said: str
) -> None:
    series(offnpu_kit, {CTX: PRISTINE.replace("return x\n", "return -x\n")}, *trailers)
    patches = {p.name: p.read_bytes() for p in offnpu_kit.patches.iterdir()}
    proc = offnpu_kit.run("lint")
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    assert (
        len(errors) == 1
        and errors[0].startswith("kit: error: 0001-case.patch: ")
        and said in errors[0]
    ), errors
    assert " -- " in errors[0]  # then the fix
    assert {p.name: p.read_bytes() for p in offnpu_kit.patches.iterdir()} == patches


def test_a_removed_module_is_one_change() -> None:
    (change,) = off_npu_changes(CTX, PRISTINE, None)
    assert (change.unit, change.statement) == ("<module>", "removed: the module")


@pytest.mark.parametrize("start", ["\ufeff", ""], ids=["bom", "crlf"])
def test_spdx_lines_behind_a_bom_or_with_crlf_are_a_header(start: str) -> None:
    lines = [f"{start}# SPDX-License-Identifier: Apache-2.0", SPDX.splitlines()[1], "X = 1"]
    diff = "".join(
        [
            f"diff --git a/{CTX} b/{CTX}\nnew file mode 100644\n--- /dev/null\n+++ b/{CTX}\n@@ "
            "-0,0 +1,3 @@\n"
        ]
        + [f"+{line}\r\n" for line in lines]
    )
    (file_diff,) = parse(diff)
    assert [f for f in check_file(file_diff, "\n".join(lines)) if f.rule == "KIT003"] == []
    # the header really missing: still KIT003
    bare = diff.replace("SPDX-FileCopyrightText", "Copyright")
    assert [f.rule for f in check_file(parse(bare)[0], "") if f.rule == "KIT003"] == ["KIT003"]
