"""The gates of a git target are its own: a small upstream whose `.pre-commit-config.yaml` runs a local
hook from its tools/ and names a remote hook the registry does not serve. `lint` on a git-sourced
checkout and `pr --onto` report the local hook's finding by id, file and line, the remote one as
unchecked, and pass once the config drops both."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    AUTHOR,
    KIT_AUTHOR,
    KIT_ROOT,
    SMALL_UPSTREAM,
    SPDX,
    Kit,
    commit_patch,
    copy_kit,
    lint,
    make_series,
    pinned_kit,
)
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

from scripts.checks import precommit
from scripts.gitcmd import git

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
    # listed, not a file gate
    assert "signoff-commit" in out and "not run by `pre-commit run` (another stage)" in out
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
    assert code == 0 and f"{UNSERVED_HOOK} unchecked" not in out and f"{UNSERVED_HOOK}" in out, out


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
    proc = small_kit.run("pr", "--onto", str(upstream), "main", "--3way", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    own, _, theirs = out.partition("pre-existing upstream, not the series'")
    assert (
        f"vllm_omni/attn.py:6: {NPU_IMPORT_HOOK}" in own
        and f"vllm_omni/attn.py:1: {UNSERVED_HOOK}" in own
    )
    # upstream's line 1, untouched by the series
    assert f"vllm_omni/attn.py:1: {NPU_IMPORT_HOOK}" in theirs
    assert "nothing recorded" in out and not (small_kit.patches / "revisions.toml").exists()
    # The target drops both gates and states its PR template and DCO rule: the PR follows them.
    (upstream / ".github").mkdir()
    (upstream / ".github/PULL_REQUEST_TEMPLATE.md").write_text(TEMPLATE, encoding="utf-8")
    (upstream / "CONTRIBUTING.md").write_text(
        "# Contributing\n\n## DCO\n\nSign off: Signed-off-by.\n"
    )
    add_gates(upstream, GATES_DROPPED, "Drop the NPU import and style gates")
    proc = small_kit.run("pr", "--onto", str(upstream), "main", "--3way", env=env)
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


# ---- the kit's verdict is pre-commit's: each form of a tree's config, judged both ways ----

# The series of every row: torch_npu imported lazily inside the NPU branch, a line with trailing
# blanks and a call ruff format would rewrite (both NPU-only: off NPU nothing changes), and a note.
TABLE_ATTN = (
    'def attend(q):\n    if q.device.type == "npu":\n        import torch_npu\n\n'
    "        return torch_npu.f(q,  'x')   \n    return q\n"
)
TABLE_SERIES = {"vllm_omni/attn.py": TABLE_ATTN, "notes/npu.md": "# NPU\n\nUses torch_npu.\n"}
PYGREP_NPU = """      - id: no-torch-npu
        name: no torch_npu
        entry: import torch_npu
        language: pygrep
"""
RUFF_CHECK = """      - id: ruff-check
        name: ruff check
        entry: ruff check --force-exclude
        language: python
        types_or: [python, pyi]
        additional_dependencies: [ruff==0.14.10]
"""
VERBOSE_FILES = (
    "        files: |\n          (?x)^(\n              vllm_omni/.*\\.py\n          )$\n"
)
VERBOSE_TOP = "exclude: |\n  (?x)^(\n      docs/.*|\n      build/.*\n  )$\n"


def local(*hooks: str, top: str = "") -> str:
    return f"{top}repos:\n  - repo: local\n    hooks:\n" + "".join(hooks)


def hook(hook_id: str, entry: str, language: str, *more: str) -> str:
    lines = [
        f"id: {hook_id}",
        f"name: {hook_id}",
        f"entry: {entry}",
        f"language: {language}",
        *more,
    ]
    return "      - " + "".join(
        f"{'' if i == 0 else '        '}{line}\n" for i, line in enumerate(lines)
    )


# (row, the tree's config, other files of the tree, lint's exit, what its one line or a finding says)
CONFIG_FORMS = [
    (
        "verbose-regex-top-and-hook-level",
        local(PYGREP_NPU + VERBOSE_FILES + "        exclude: (?x) _pb2\\.py$\n", top=VERBOSE_TOP),
        {},
        1,
        "vllm_omni/attn.py:3: no-torch-npu",
    ),
    ("hook-args-reach-the-hook", local(RUFF_CHECK + "        args: [--select, E9]\n"), {}, 0, ""),
    ("only-ruff-check-no-format", local(RUFF_CHECK), {}, 0, ""),
    (
        "bad-files-regex",
        local(PYGREP_NPU + '        files: "(["\n'),
        {},
        2,
        "'([' is not a valid python regex",
    ),
    (
        "entry-with-an-unbalanced-quote",
        local(hook("q", '"python -c \'print(1)"', "system")),
        {},
        2,
        "No closing quotation",
    ),
    (
        "bad-pygrep-pattern",
        local(hook("grep", '"(["', "pygrep")),
        {},
        1,
        ".pre-commit-config.yaml:1: grep failed (exit 1) naming no line: re.error: unterminated",
    ),
    (
        "config-is-a-symlink",
        "->tools/gates.yaml",
        {"tools/gates.yaml": local(PYGREP_NPU)},
        1,
        "vllm_omni/attn.py:3: no-torch-npu",
    ),
    (
        "always-run",
        local(
            hook(
                "always",
                "python -c 'raise SystemExit(3)'",
                "system",
                "files: ^nothing$",
                "always_run: true",
                "pass_filenames: false",
            )
        ),
        {},
        1,
        "always failed (exit 3) naming no line",
    ),
    (
        "a-hook-that-modifies-files",
        local(
            hook(
                "trailing-whitespace",
                "trailing-whitespace-fixer",
                "python",
                "types: [text]",
                "additional_dependencies: [pre-commit-hooks==6.0.0]",
            )
        ),
        {},
        1,
        "vllm_omni/attn.py:5: trailing-whitespace trailing-whitespace would change this line",
    ),
    (
        "types-or-exclude-types-stages",
        local(
            hook("md-npu", "torch_npu", "pygrep", "types_or: [markdown, yaml]"),
            hook("not-python", "import torch_npu", "pygrep", "exclude_types: [python]"),
            hook("manual-only", "torch", "pygrep", "stages: [manual]"),
        ),
        {},
        1,
        "notes/npu.md:3: md-npu",
    ),
    (
        "a-hook-script-missing-in-the-tree",
        local(hook("checker", "python tools/missing_check.py", "python")),
        {},
        1,
        # what the user can act on once the scratch copy is gone: their tree, the file, the hook
        "checker runs tools/missing_check.py, which {where} lacks (its .pre-commit-config.yaml "
        "names it in hook checker's entry) (fix: add tools/missing_check.py to {where}, or drop "
        "hook checker from its .pre-commit-config.yaml)",
    ),
    ("not-yaml", "repos: [1\n", {}, 2, "while parsing a flow sequence"),
    ("not-a-mapping", "- a\n", {}, 2, "is not a config pre-commit runs"),
]


def gated_upstream(tmp_path: Path, config: str, files: dict[str, str]) -> Path:
    """The small upstream with config as its .pre-commit-config.yaml ("->path": a link to path)."""
    repo = upstream_repo(tmp_path / "upstream", {**SMALL_UPSTREAM, **files})
    if config.startswith("->"):
        os.symlink(config[2:], repo / ".pre-commit-config.yaml")
    else:
        (repo / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    commit_all(repo, "Gates")
    return repo


def plain_pre_commit(tree: Path, files: list[str], dest: Path) -> tuple[int, dict[str, str], str]:
    """(exit, hook id -> Passed/Failed/Skipped, output) of plain `pre-commit run --files` in a clone
    of tree, with the same store as the kit's (its hook envs are built once)."""
    git("clone", "-q", str(tree), str(dest), cwd=tree.parent)
    argv = [sys.executable, "-m", "pre_commit", "run", "--verbose", "--color", "never", "--files"]
    proc = subprocess.run(
        [*argv, *files],
        cwd=dest,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    )
    statuses = {r.id: r.status for r in precommit.hook_runs(proc.stdout)}
    return proc.returncode, statuses, proc.stdout + proc.stderr


def counted_hooks(out: str) -> set[str]:
    """The hooks with a finding lint counts (its own rules, KIT..., left out)."""
    kept = [line for line in out.splitlines() if "[pre-existing upstream" not in line]
    found = re.findall(r"^\S+:\d+: (\S+) ", "\n".join(kept), re.M)
    return {h for h in found if not h.startswith("KIT")}


def judged_both_ways(kit: Kit, tmp_path: Path, row: tuple, spawn: Callable | None = None) -> None:
    """One row: lint on the series (by spawn, else in-process) against plain pre-commit."""
    name, config, files, code, said = row
    upstream = gated_upstream(tmp_path, config, files)
    on_git(kit, upstream)
    make_series(kit, [(TABLE_SERIES, "[NPU] Attend on NPU", "npu-attend")])
    before = {p: (kit.checkout / p).read_bytes() for p in TABLE_SERIES}
    proc = spawn() if spawn else kit.run("lint")
    out = proc.stdout + proc.stderr
    commit = git("rev-parse", "HEAD", cwd=upstream).strip()
    said = said.replace("{where}", f"{upstream} v0.1.0 at {commit[:12]}")
    assert proc.returncode == code and said in out and "Traceback" not in out, (name, out)
    assert {p: (kit.checkout / p).read_bytes() for p in TABLE_SERIES} == before  # nothing fixed
    plain, statuses, plain_out = plain_pre_commit(
        kit.checkout, sorted(TABLE_SERIES), tmp_path / "plain"
    )
    if code == 2:
        errors = [line for line in out.splitlines() if line.startswith("kit: error:")]
        assert len(errors) == 1 and " -- " in errors[0], out
        # pre-commit refuses the config too: no hook passes
        assert plain != 0 and "Passed" not in statuses.values(), (name, plain_out)
        return
    failed = {hook for hook, status in statuses.items() if status == "Failed"}
    assert plain == (1 if failed else 0) and counted_hooks(out) == failed, (name, out, plain_out)


@pytest.mark.parametrize("row", CONFIG_FORMS, ids=[r[0] for r in CONFIG_FORMS])
def test_lints_verdict_is_plain_pre_commits_on_each_config_form(
    small_kit: Kit, tmp_path: Path, row: tuple
) -> None:
    judged_both_ways(small_kit, tmp_path, row)


NOX_ROWS = ("verbose-regex-top-and-hook-level", "hook-args-reach-the-hook", "bad-files-regex")


def test_nox_lint_as_the_readme_sets_it_up_gives_the_same_verdicts(tmp_path: Path) -> None:
    # `.venv/bin/nox -s lint` in a kit folder, by a user whose PATH lacks the venv's bin: the session
    # makes its own venv (uv) with the pinned pre-commit, and lint runs there.
    seed = pinned_kit(tmp_path / "seed", SMALL_UPSTREAM)
    kit = copy_kit(tmp_path / "kit", with_patches=False)
    shutil.copy2(KIT_ROOT / "noxfile.py", kit.root / "noxfile.py")
    kit.write_pin((seed.patches / "upstream.toml").read_text(encoding="utf-8"))
    shutil.copytree(seed.root / ".work" / "downloads", kit.root / ".work" / "downloads")
    bin_dir = Path(sys.executable).parent
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != bin_dir)
    env = {**os.environ, "PATH": path, "CI": ""}

    def nox_lint() -> subprocess.CompletedProcess[str]:
        """nox -s lint, with lint's own exit (nox says it; nox itself exits 1 on any failure)."""
        argv = [str(bin_dir / "nox"), "-s", "lint"]
        proc = subprocess.run(argv, cwd=kit.root, capture_output=True, text=True, env=env)
        said = re.search(r"scripts lint failed with exit code (\d+)", proc.stdout + proc.stderr)
        proc.returncode = int(said[1]) if said else proc.returncode
        return proc

    for number, row in enumerate(r for r in CONFIG_FORMS if r[0] in NOX_ROWS):
        # each row's series anew, with the session's venv kept
        for made in kit.patches.glob("*.patch"):
            made.unlink()
        (kit.patches / "series").write_text("# test series\n", encoding="utf-8")
        (tmp_path / f"row{number}").mkdir()
        judged_both_ways(kit, tmp_path / f"row{number}", row, nox_lint)


def test_sigterm_to_lint_leaves_no_hook_child(small_kit: Kit, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    tool = (
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}\\n')\n"
        "time.sleep(300)\n"
    )
    config = local(hook("slow", "python tools/slow.py", "system"))
    upstream = gated_upstream(tmp_path, config, {"tools/slow.py": tool})
    on_git(small_kit, upstream)
    make_series(small_kit, [(TABLE_SERIES, "[NPU] Attend on NPU", "npu-attend")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts", "lint"],
        cwd=small_kit.root,
        env={**os.environ, "CI": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (pids.is_file() and pids.read_text().endswith("\n")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    hook_pid, child = (int(p) for p in pids.read_text().split())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in out, out
    for pid in (hook_pid, child):
        assert not alive(pid), f"{pid} still runs after SIGTERM to lint"


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie, exited and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_a_link_is_no_file_to_the_hooks_nor_to_the_spdx_rule(small_kit: Kit) -> None:
    small_kit.run("apply", check=True)
    (small_kit.checkout / "tools").mkdir()
    os.symlink("npu.py", small_kit.checkout / "tools/npu_alias.py")
    commit_patch(
        small_kit.checkout, {"tools/npu.py": SPDX + "X = 1\n"}, "[NPU] Module", "npu-module"
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
