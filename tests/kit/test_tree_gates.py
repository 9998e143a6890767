"""The gates of a git target are its own: a small upstream whose `.pre-commit-config.yaml` runs a local
hook from its tools/ and names a remote hook the registry does not serve. `lint` on a git-sourced
checkout and `pr --onto` report the local hook's finding by id, file and line, the remote one as
unchecked, and pass once the config drops both."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import AUTHOR, KIT_AUTHOR, RUFF, SMALL_UPSTREAM, SPDX, Kit, lint, make_series
from upstreams import (
    GATES_DROPPED,
    NPU_IMPORT_HOOK,
    UNSERVED_HOOK,
    add_gates,
    commit_all,
    gated_config,
    git_pin,
    upstream_repo,
)

from scripts.checks import hooks, precommit
from scripts.gitcmd import git

HOOKS = hooks.load_hooks(Path(__file__).parents[2] / "ci" / "upstream-hooks.toml")
# The series: torch_npu imported lazily inside the NPU branch (the kit's KIT002 is content with
# that; the target's own hook is not: it allows torch_npu only under vllm_omni/platforms/).
ATTN = (
    'def attend(q):\n    if q.device.type == "npu":\n        import torch_npu\n\n'
    "        return torch_npu.f(q)\n    return q\n"
)
TEMPLATE = """<!-- keep the sections -->
## Purpose

FILL IN why.

## Test Plan

FILL IN how.

## Test Result

FILL IN results.

## Release notes

(write one line for the release notes)
"""
COVER = "[NPU][Hardware][Ascend] Attend on Ascend NPU\n\nAttention on NPU takes its own branch.\n"


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """The small upstream as a git repository: its tree, then a commit adding its gates (main)."""
    repo = upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)
    add_gates(repo, gated_config())
    return repo


def on_git(kit: Kit, upstream: Path) -> None:
    """Pin the kit to upstream's main by the git source and apply the series there."""
    commit = git("rev-parse", "HEAD", cwd=upstream).strip()
    kit.write_pin(
        git_pin((kit.patches / "upstream.toml").read_text(encoding="utf-8"), upstream, commit)
    )


def test_lint_runs_the_git_trees_own_gates(small_kit: Kit, upstream: Path) -> None:
    on_git(small_kit, upstream)
    make_series(small_kit, [({"vllm_omni/attn.py": ATTN}, "[NPU] Attend on NPU", "npu-attend")])
    code, out = lint(small_kit)
    commit = git("rev-parse", "HEAD", cwd=upstream).strip()
    assert code == 1 and "Traceback" not in out, out
    assert f"gates: .pre-commit-config.yaml of {upstream} v0.1.0 at {commit[:12]}" in out
    assert (
        f"vllm_omni/attn.py:3: {NPU_IMPORT_HOOK} torch_npu is imported outside vllm_omni/platforms/"
        in out
    )
    assert (
        f"vllm_omni/attn.py:1: {UNSERVED_HOOK} unchecked: "
        "https://git.example.org/npu-lint/npu-style-hooks "
        "at v0.3.1: no registry package" in out
    )
    assert (
        "signoff-commit" in out and "runs at commit-msg, not on files" in out
    )  # listed, not a file gate
    assert "KIT002" not in out  # the kit's own rule is met: the import is NPU-only
    # The config drops both: the same series passes the gates that are left.
    add_gates(upstream, GATES_DROPPED, "Drop the NPU import and style gates")
    on_git(small_kit, upstream)
    small_kit.run("apply", check=True)  # the checkout moves to the new pin in place
    code, out = lint(small_kit)
    assert code == 0 and NPU_IMPORT_HOOK not in out and UNSERVED_HOOK not in out, out
    assert "trailing-whitespace" in out


def test_unchecked_fails_only_where_the_series_touches_what_the_hook_sees(
    small_kit: Kit, upstream: Path
) -> None:
    on_git(small_kit, upstream)
    make_series(small_kit, [({"notes/npu.md": "# NPU\n"}, "[NPU] Notes", "npu-notes")])
    code, out = lint(small_kit)
    assert (
        code == 0
        and f"{UNSERVED_HOOK} unchecked" not in out
        and "not run: https://git.example.org" in out
    ), out


def test_pr_onto_reports_the_targets_findings_apart_from_upstreams(
    small_kit: Kit, upstream: Path, identity: dict[str, str]
) -> None:
    # Upstream's own line already fails its import hook: pre-existing, shown apart, not the series'.
    (upstream / "vllm_omni/attn.py").write_text(
        "import torch_npu\n\n\ndef attend(q):\n    return q\n"
    )
    commit_all(upstream, "NPU import at the top")
    make_series(
        small_kit,
        [({"vllm_omni/attn.py": ATTN}, "[NPU] Attend on NPU", "npu-attend")],
        author=KIT_AUTHOR,
    )
    (small_kit.patches / "cover.md").write_text(COVER, encoding="utf-8")
    env = {**identity, "PATH": os.environ["PATH"]}
    proc = small_kit.run("pr", "--ruff", RUFF, "--onto", str(upstream), "main", "--3way", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    own, _, theirs = out.partition("pre-existing upstream, not the series'")
    assert (
        f"vllm_omni/attn.py:6: {NPU_IMPORT_HOOK}" in own
        and f"vllm_omni/attn.py:1: {UNSERVED_HOOK}" in own
    )
    assert (
        f"vllm_omni/attn.py:1: {NPU_IMPORT_HOOK}" in theirs
    )  # upstream's line 1, untouched by the series
    assert "nothing recorded" in out and not (small_kit.patches / "revisions.toml").exists()
    # The target drops both gates and states its PR template and DCO rule: the PR follows them.
    (upstream / ".github").mkdir()
    (upstream / ".github/PULL_REQUEST_TEMPLATE.md").write_text(TEMPLATE, encoding="utf-8")
    (upstream / "CONTRIBUTING.md").write_text(
        "# Contributing\n\n## DCO\n\nSign off: Signed-off-by.\n"
    )
    add_gates(upstream, GATES_DROPPED, "Drop the NPU import and style gates")
    proc = small_kit.run("pr", "--ruff", RUFF, "--onto", str(upstream), "main", "--3way", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "on the series' own lines (0)" in out, out
    cover = (small_kit.root / ".work/pr/v1/cover.txt").read_text()
    assert (
        cover.count("Gates of the target") == 1
        and "DCO rule: CONTRIBUTING.md of the target" in cover
    )
    assert "PR template: .github/PULL_REQUEST_TEMPLATE.md of the target" in cover
    pr_body = (small_kit.root / ".work/pr/v1/1-series/pr-body.md").read_text()
    headings = [line for line in pr_body.splitlines() if line.startswith("## ")]
    assert headings == ["## Purpose", "## Test Plan", "## Test Result", "## Release notes"], pr_body
    assert "Attention on NPU takes its own branch." in pr_body and "write one line" in pr_body
    assert "FILL IN" not in pr_body  # the kit fills the template's sections it has


# ---- reading a config: which hook runs how (no tree needed) ----

CASES = [
    # (config hook rows under one repo, the hook's run, what the kit says of it)
    (
        "  - repo: https://github.com/pre-commit/pre-commit-hooks\n    rev: v5.0.0\n    hooks:\n"
        "      - id: end-of-file-fixer\n",
        "fixer",
        "pre-commit-hooks==5.0.0",
    ),
    (
        "  - repo: https://github.com/astral-sh/ruff-pre-commit\n    rev: v0.15.0\n    hooks:\n"
        "      - id: ruff-check\n",
        "ruff",
        "ruff==0.15.0",
    ),
    (
        "  - repo: https://github.com/crate-ci/typos\n    rev: typos-dict-v0.13.13\n    hooks:\n   "
        "   - id: typos\n",
        "checker",
        "typos==1.40.1",
    ),  # the table's own rev: the table's package
    (
        "  - repo: https://github.com/crate-ci/typos\n    rev: typos-dict-v0.14.0\n    hooks:\n    "
        "  - id: typos\n",
        "no",
        "no release of typos",
    ),
    (
        "  - repo: https://github.com/pre-commit/pre-commit-hooks\n    rev: v6.0.0\n    hooks:\n"
        "      - id: check-toml\n",
        "no",
        "no registry package",
    ),  # a hook of a mapped repo the table lacks
    (
        "  - repo: local\n    hooks:\n      - id: mypy\n        entry: mypy\n        language: "
        "node\n",
        "no",
        "language node is not one the kit runs",
    ),  # a language pre-commit knows and the kit does not run: unchecked, not malformed
    (
        "  - repo: local\n    hooks:\n      - id: x\n        entry: x\n        language: system\n"
        "        types: [zig]\n",
        "no",
        "file types zig the kit cannot tell",
    ),
    (
        "  - repo: local\n    hooks:\n      - id: x\n        entry: tools/x.sh\n        language: "
        "script\n"
        "        stages: [manual]\n",
        "no",
        "runs at manual, not on files",
    ),
]


@pytest.mark.parametrize(("rows", "run", "said"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_each_hook_of_a_config_maps_to_a_package_a_local_run_or_unchecked(
    rows: str, run: str, said: str
) -> None:
    source = precommit.parse_config(f"repos:\n{rows}", "the tree", HOOKS)
    (hook,) = source.hooks
    assert hook.run == run and said in f"{hook.package} {hook.why}", hook


LOCAL = "repos:\n  - repo: local\n    hooks:\n      - id: x\n"
# (the tree's config, what the one line says of it, what it says to do)
MALFORMED = [
    ("repos: [1\n", "of {where} is not YAML", "fix the tree's config"),
    ("- a\n", "is not a mapping", "make the tree's .pre-commit-config.yaml a pre-commit config"),
    ("just text\n", "is not a mapping", "make the tree's"),
    ("fail_fast: true\n", "has no `repos:` list", "make repos: a list"),
    ("repos: local\n", "has no `repos:` list", "make repos: a list"),
    ("repos:\n  - hooks: []\n", "repository #1 of repos has no `repo:`", "give it both"),
    (
        "repos:\n  - repo: local\n    hooks: x\n",
        "repository #1 of repos has no `repo:` or no `hooks:`",
        "both",
    ),
    (
        "repos:\n  - repo: local\n    hooks:\n      - name: x\n",
        "hook #1 of local has no id",
        "an `id:`",
    ),
    (
        LOCAL + "        entry: x\n        language: pyhton\n",
        "local hook x has language 'pyhton'",
        "one of",
    ),
    (
        LOCAL + "        entry: x\n",
        "local hook x has language None",
        "give x one of pre-commit's languages",
    ),
    (LOCAL + "        language: python\n", "local hook x has no entry", "give x an `entry:`"),
    (
        LOCAL + "        entry: x\n        language: system\n        args: --fix\n",
        "x's args is not a list",
        "fix",
    ),
]


@pytest.mark.parametrize(
    ("text", "said", "fix"), MALFORMED, ids=[str(i) for i in range(len(MALFORMED))]
)
def test_a_malformed_tree_config_is_one_line(text: str, said: str, fix: str) -> None:
    with pytest.raises(hooks.HooksError) as err:
        precommit.parse_config(text, "the tree", HOOKS)
    assert err.value.what.startswith(".pre-commit-config.yaml of the tree"), err.value.what
    assert said.replace("of {where} ", "") in err.value.what
    assert fix in err.value.fix, err.value.fix


@pytest.mark.parametrize("row", [0, 1, 4, 7, 8, 10])
def test_lint_stops_on_a_malformed_tree_config_with_one_line(
    small_kit: Kit, upstream: Path, row: int
) -> None:
    text, said, fix = MALFORMED[row]
    add_gates(upstream, text, "A broken config")
    on_git(small_kit, upstream)
    make_series(small_kit, [({"vllm_omni/attn.py": ATTN}, "[NPU] Attend on NPU", "npu-attend")])
    series = {p.name: p.read_bytes() for p in small_kit.patches.glob("*.patch")}
    head = git("rev-parse", "HEAD", cwd=small_kit.checkout)
    code, out = lint(small_kit)
    errors = [line for line in out.splitlines() if line.startswith("kit: error:")]
    assert code == 2 and "Traceback" not in out and len(errors) == 1, out
    assert f"error: .pre-commit-config.yaml of {upstream} v0.1.0 at " in errors[0], out
    assert said.replace("of {where} ", "") in errors[0] and fix in errors[0], out
    assert {
        p.name: p.read_bytes() for p in small_kit.patches.glob("*.patch")
    } == series  # nothing lost
    assert git("rev-parse", "HEAD", cwd=small_kit.checkout) == head


def test_top_level_files_and_exclude_apply_to_every_hook() -> None:
    text = "files: ^vllm_omni/\nexclude: _pb2\\.py$\n" + gated_config()
    hook = next(
        h for h in precommit.parse_config(text, "t", HOOKS).hooks if h.id == NPU_IMPORT_HOOK
    )
    tags = hooks.file_tags("vllm_omni/a.py", b"x = 1\n")
    assert hook.sees("vllm_omni/a.py", tags) and not hook.sees("tests/a.py", tags)
    assert not hook.sees("vllm_omni/a_pb2.py", tags)


def test_a_file_level_finding_on_a_file_the_series_changes_is_the_series(tmp_path: Path) -> None:
    # debug-statements names no line of a file that does not parse: the series broke it, not
    # upstream.
    (tmp_path / "a.py").write_text("def f(:\n    pass\n\n\nX = 1\n")
    debug = [h for h in HOOKS if h.id == "debug-statements"]
    gate = hooks.run_gate(debug, tmp_path, {"a.py": {5}}, set(), hooks.Bins(None), tmp_path)
    assert [(f.hook, f.file) for f in gate.counted] == [
        ("debug-statements", "a.py")
    ] and not gate.pre_existing


def test_a_link_is_no_file_to_the_hooks_nor_to_the_spdx_rule(small_kit: Kit) -> None:
    small_kit.run("apply", check=True)
    (small_kit.checkout / "tools").mkdir()
    (small_kit.checkout / "tools/npu.py").write_text(SPDX + "X = 1\n", encoding="utf-8")
    os.symlink("npu.py", small_kit.checkout / "tools/npu_alias.py")
    git("add", "-A", cwd=small_kit.checkout)
    git(
        "commit",
        "-q",
        "-m",
        "[NPU] Module\n\nWhy.\n\nUpstream-Status: Pending\nKit-Patch: npu-module\n",
        cwd=small_kit.checkout,
        env=AUTHOR,
    )
    small_kit.run("refresh", check=True)
    code, out = lint(small_kit)
    assert code == 0 and "KIT003" not in out, out
    # ... while the same name as a file without the header is still found
    (small_kit.checkout / "tools/npu_alias.py").unlink()
    (small_kit.checkout / "tools/npu_alias.py").write_text("X = 2\n", encoding="utf-8")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=small_kit.checkout, env=AUTHOR)
    small_kit.run("refresh", check=True)
    code, out = lint(small_kit)
    assert code == 1 and "tools/npu_alias.py:1: KIT003" in out, out
