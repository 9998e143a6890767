"""Each of the kit's own lint checks fails on a deliberately bad patch; ruff runs with upstream's
settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from conftest import KIT_ROOT, MARKED_TEST, SPDX, Kit, lint, make_series

from scripts import kittools
from scripts.checks.lint import tools_for
from scripts.checks.rules import RULES, check_file, npu_only_lines
from scripts.diffparse import FileDiff, parse
from scripts.pr import body
from scripts.workspace import Workspace

GOOD_ATTN = (
    "def attend(q):\n"
    '    if q.device.type == "npu":\n'
    "        import torch_npu\n\n"
    '        return torch_npu.npu_fusion_attention(q, q, q, 1, "TND")[0]\n'
    "    return q\n"
)

# (rule, file edits) — each breaks exactly one rule.
BAD = {
    "KIT001": {
        "vllm_omni/attn.py": "def attend(q):\n    if q.is_npu:\n        return q\n    return q\n"
    },
    "KIT002": {
        "vllm_omni/attn.py": "def npu_attend(q):\n    import os, torch_npu\n\n    return os.sep, torch_npu\n"
    },
    "KIT003": {"vllm_omni/extra.py": "X = 1\n"},
    "KIT004": {"tests/test_extra.py": SPDX + "\n\ndef test_x():\n    assert True\n"},
    "KIT005": {
        "vllm_omni/attn.py": "import pickle\n\n\ndef attend(q):\n    return pickle.dumps(q)\n"
    },
    "KIT006": {
        "vllm_omni/attn.py": "import torch\n\n\ndef attend(q):\n    torch.cuda.empty_cache()\n    return q\n"
    },
    "KIT007": {"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"},
}
# each finding's line
AT = {"KIT001": 2, "KIT002": 2, "KIT003": 1, "KIT004": 1, "KIT005": 1, "KIT006": 5, "KIT007": 2}


def test_good_series_is_clean_with_long_test_lines(small_kit: Kit) -> None:
    # upstream lets tests/ exceed it
    long_test = MARKED_TEST + '\n\ndef test_y():\n    assert "' + "a" * 130 + '"\n'
    make_series(
        small_kit,
        [({"vllm_omni/attn.py": GOOD_ATTN, "tests/test_attn_npu.py": long_test}, "[NPU] ok", "ok")],
    )
    code, out = lint(small_kit)
    assert code == 0 and "lint clean" in out, out


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_own_check_fails_on_a_bad_patch(small_kit: Kit, rule: str) -> None:
    make_series(small_kit, [(BAD[rule], f"[NPU] bad {rule}", "bad")])
    code, out = lint(small_kit)
    assert code == 1, out
    finding = next(line for line in out.splitlines() if f" {rule} " in line)
    (path,) = BAD[rule]
    checked = next(r for r in RULES if r.id == rule)
    # file:line, rule, fix
    assert finding.startswith(f"{path}:{AT[rule]}: {rule} ") and "(fix: " in finding, finding
    # KIT007 words each finding itself
    assert checked.check is None or f" {rule} {checked.message}" in finding


def test_npu_only_lines_are_the_if_body_not_else_nor_a_docstring() -> None:
    src = 'def f(x):\n    if x.device.type == "npu":\n        return g(x)\n    return x\n\n\n'
    src += 'def g(x):\n    """Doc."""\n    return x\n'
    assert npu_only_lines(src) == {3, 9}  # g's docstring (line 8) is no statement coverage can run
    src = 'def f(x):\n    if x.device.type == "npu":\n        import torch_npu\n    else:\n        import torch_npu\n'
    assert 3 in npu_only_lines(src) and 5 not in npu_only_lines(src)


def test_every_rule_has_a_bad_patch_and_a_line_in_the_pr_test_plan() -> None:
    assert sorted(BAD) == [rule.id for rule in RULES]
    (lint_plan,) = [how for name, _, how in body.PLAN if name == "lint"]
    assert all(rule.requires in lint_plan for rule in RULES)


def test_tool_pins_are_found_by_their_normalized_name_and_upstreams_ruff_is_typed_only_in_ci(
    tmp_path: Path,
) -> None:
    (tmp_path / "user.txt").write_text("# tools\npytest==9.2.0\n", encoding="utf-8")
    tools = tmp_path / "tools.txt"
    tools.write_text(
        "# tools\nPyYAML==6.0.3\npytest-benchmark==5.3.1\n-r user.txt\n", encoding="utf-8"
    )
    assert kittools.pinned("pyyaml", tools) == "PyYAML==6.0.3"
    assert kittools.version("Pytest_Benchmark", tools) == "5.3.1"
    # from the included file, not pytest-benchmark's line
    assert kittools.version("pytest", tools) == "9.2.0"
    with pytest.raises(RuntimeError, match="pytest-cov is not pinned"):
        kittools.pinned("pytest-cov", tools)
    assert kittools.normalize("Foo.Bar__baz-Qux") == "foo-bar-baz-qux"
    assert kittools.dist_name("vllm-omni") == kittools.dist_name("VLLM.Omni") == "vllm_omni"
    # upstream's ruff version is typed only in ci/
    ruff = tools_for(Workspace(KIT_ROOT)).ruff_pin
    assert kittools.version("ruff", KIT_ROOT / "ci" / "kit-dev-tools.txt") == ruff
    assert f"ruff v{ruff} " in body.plan_lines(ruff)[0]
    typed = [
        p.relative_to(KIT_ROOT)
        for p in (KIT_ROOT / "scripts").rglob("*.py")
        if ruff in p.read_text("utf-8")
    ]
    assert typed == [], (
        f"ruff {ruff} typed in {typed}: read it from ci/upstream-pre-commit-config.yaml (Tools.ruff_pin)"
    )


# ---- KIT002: every form of importing torch_npu; NPU-only decided by the device guard, not by names
# ----
GUARD = 'def f(q):\n    if q.device.type == "npu":\n'
OFF_NPU = 'def f(q):\n    if q.device.type != "npu":\n'
# (form, source of a new file, flagged): the import is always on an added line; the rows are data
# (torch_npu_forms.toml), with GUARD and OFF_NPU written {guard} and {off_npu}.
TORCH_NPU_FORMS = [
    (form, row["source"].replace("{guard}", GUARD).replace("{off_npu}", OFF_NPU), row["flagged"])
    for form, row in tomllib.loads(
        (Path(__file__).parent / "torch_npu_forms.toml").read_text("utf-8")
    ).items()
]


def new_file_diff(path: str, source: str) -> FileDiff:
    return FileDiff(path, True, tuple(enumerate(source.splitlines(), 1)), 0)


def kit002(diff: FileDiff, source: str) -> list[int]:
    return [f.line for f in check_file(diff, source) if f.rule == "KIT002"]


@pytest.mark.parametrize(
    ("form", "source", "flagged"), TORCH_NPU_FORMS, ids=[f[0] for f in TORCH_NPU_FORMS]
)
def test_torch_npu_import_forms(form: str, source: str, flagged: bool) -> None:
    found = kit002(new_file_diff("vllm_omni/x.py", source), source)
    assert bool(found) == flagged, (form, found)


def test_checks_judge_added_lines_and_torch_npu_counts_even_where_the_file_does_not_parse() -> None:
    patch = (  # added line numbers follow the hunks
        "diff --git a/vllm_omni/a.py b/vllm_omni/a.py\n--- a/vllm_omni/a.py\n+++ b/vllm_omni/a.py\n"
        "@@ -10,2 +10,3 @@\n ctx\n+    y = x.is_npu\n ctx\n"
    )
    (diff,) = parse(patch)
    assert diff.added == ((11, "    y = x.is_npu"),)
    assert [f.rule for f in check_file(diff, None)] == ["KIT001"]
    unchanged = "import torch_npu\nX = 1\n"  # on an unchanged line: not the series' doing
    assert kit002(FileDiff("vllm_omni/x.py", False, ((2, "X = 1"),), 0), unchanged) == []
    broken = "import os, torch_npu\ndef broken(:\n"
    assert kit002(new_file_diff("vllm_omni/x.py", broken), broken) == [1]
    text = "Call `import torch_npu` first.\n"
    assert check_file(new_file_diff("CHANGES.txt", text), text) == []  # not Python: not an import
