"""The real series on a git target that carries its own gates: the pinned release's tree as upstream,
with a `.pre-commit-config.yaml` whose local hook (from its tools/, with a registry dependency)
refuses torch_npu outside vllm_omni/platforms/, and a remote hook the registry does not serve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import Kit, copy_kit, lint
from upstreams import (
    GATES_DROPPED,
    NPU_IMPORT_HOOK,
    NPU_IMPORT_TOOL,
    UNSERVED_HOOK,
    add_gates,
    gated_config,
    git_pin,
    real_wheel,
    release_repo,
)

from scripts.gitcmd import git

# the real pinned wheel, and the hook's dependency from the package registry
pytestmark = pytest.mark.network

PAGED = "vllm_omni/experimental/ar_diffusion/kv_cache/paged_attention.py"
PLATFORM = "vllm_omni/platforms/npu/layers/fusion_attention.py"
DEPENDENCY = "tomli==2.4.1"
# The hook imports what it declares: it runs only where its additional_dependencies are installed.
TOOL = "import tomli  # noqa: F401  (declared in additional_dependencies)\n" + NPU_IMPORT_TOOL


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    repo = release_repo(tmp_path / "vllm-omni", real_wheel(tmp_path / "downloads"))
    add_gates(repo, gated_config((DEPENDENCY,)), tool=TOOL)
    return repo


def on_git(kit: Kit, upstream: Path) -> None:
    commit = git("rev-parse", "HEAD", cwd=upstream).strip()
    kit.write_pin(
        git_pin((kit.patches / "upstream.toml").read_text(encoding="utf-8"), upstream, commit)
    )
    kit.run("apply", check=True)


def test_lint_runs_the_targets_gates_on_the_real_series(tmp_path: Path, upstream: Path) -> None:
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    kit.seed_wheel(real_wheel(tmp_path / "downloads"))
    on_git(kit, upstream)
    # The series reaches torch_npu through the NPU platform package only: the target's gate passes it.
    assert "import torch_npu" not in (kit.checkout / PAGED).read_text(encoding="utf-8")
    assert "import torch_npu" in (kit.checkout / PLATFORM).read_text(encoding="utf-8")
    code, out = lint(kit)
    assert code == 1 and "Traceback" not in out, out
    assert f"{NPU_IMPORT_HOOK} torch_npu is imported outside" not in out, out
    unchecked = re.findall(rf"^.*(vllm_omni/\S+):\d+: {UNSERVED_HOOK} unchecked: (.*)$", out, re.M)
    assert unchecked and all("no registry package" in why for _, why in unchecked), out
    # the hook's env is pre-commit's, made once (with its dependency) and reused by the next lint
    code, again = lint(kit)
    assert code == 1 and "pre-commit made the hook env" not in again, again
    assert f"{NPU_IMPORT_HOOK} torch_npu is imported outside" not in again, again
    # the target drops both gates: the series passes the ones left
    add_gates(upstream, GATES_DROPPED, "Drop the NPU import and style gates")
    on_git(kit, upstream)
    code, out = lint(kit)
    assert code == 0 and NPU_IMPORT_HOOK not in out and UNSERVED_HOOK not in out, out
    assert "trailing-whitespace" in out
