"""Synthetic upstreams from the real pinned release (the 0.30.0 wheel's tree as v0.30.0) and the real
series: each "next" upstream a branch made as upstream would make it (a patch verbatim, the same
change in other words, one hunk of a patch, a rename of a touched file, a merge later reverted)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import AUTHOR, KIT_ROOT

from scripts.diffparse import hunks
from scripts.gitcmd import git
from scripts.pin import extract_wheel, fetch_wheel, load_pin
from scripts.pr import revision
from scripts.workspace import Workspace

PATCHES = KIT_ROOT / "patches"
ROPE = "vllm_omni/diffusion/layers/rope.py"
LINGBOT = "vllm_omni/diffusion/models/lingbot_world/transformer.py"
CONFIG = "benchmarks/lingbot_world/configs/npu_usp4_eager.yaml"
REPLAY_SERIES = (
    '            if (query.is_cuda or query.device.type == "npu") and query.shape[0] == 1:\n'
)
# 0005's guard as upstream typed it: other spacing, a comment of its own.
REPLAY_UPSTREAM = (
    '            if (query.is_cuda or query.device.type=="npu") and query.shape[0]==1:  # NPU too\n'
)
# 0006's settings in upstream's words: other comments, keys in another order, flow-style mappings.
CONFIG_UPSTREAM = """\
# Ascend: 4 NPUs with Ulysses sequence parallelism (degree 4), eager mode.
dtype: bfloat16
pipeline: lingbot_world
distributed_executor_backend: mp
async_chunk: false
stages:
- stage_id: 0
  devices: '0,1,2,3'
  max_num_seqs: 1
  enforce_eager: true
  model_class_name: LingBotWorldCausalDMDPipeline
  engine_backend: vllm_omni.experimental.ar_diffusion.engine.ARDiffusionEngine
  step_execution: true
  streaming_output: true
  parallel_config: {tensor_parallel_size: 1, sequence_parallel_size: 4, ulysses_degree: 4, ring_degree: 1}
  default_sampling_params:
    num_inference_steps: 4
    output_type: pil
    extra_args: {flow_shift: 5.0}
  model_config:
    ar_diffusion_height: 480
    ar_diffusion_width: 832
    ar_diffusion_kv_config: {gpu_memory_fraction: 0.6, warmup_cudagraph: false}
"""


# One of upstream's own CPU tests (the wheel has none), for a module the series still touches after
# --move.
UPSTREAM_TEST = "tests/diffusion/ar_diffusion/test_paged_attention_cpu_copy.py"
UPSTREAM_TEST_TEXT = """\
# SPDX-License-Identifier: Apache-2.0
import pytest
import torch

from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import _to_device_async

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def test_copy_to_cpu_keeps_values():
    t = torch.arange(6)
    assert torch.equal(_to_device_async(t, torch.device("cpu")), t)
"""


def patch(name_part: str) -> Path:
    return next(p for p in sorted(PATCHES.glob("*.patch")) if name_part in p.name)


def real_wheel(cache: Path) -> Path:
    """The pinned release wheel (digest verified), from the kit's cache when it has it, else the
    registry."""
    pin = load_pin(PATCHES / "upstream.toml")
    cached = KIT_ROOT / ".work" / "downloads" / pin.wheel_filename
    cache.mkdir(parents=True, exist_ok=True)
    if cached.is_file() and not (cache / cached.name).exists():
        shutil.copy2(cached, cache / cached.name)
    return fetch_wheel(pin, cache)


def commit_all(repo: Path, message: str) -> str:
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo, env=AUTHOR)
    return git("rev-parse", "HEAD", cwd=repo).strip()


def upstream_repo(repo: Path, files: dict[str, str], message: str = "vllm-omni 0.1.0") -> Path:
    """An upstream's git repository holding files, one commit on main."""
    repo.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=repo)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    commit_all(repo, message)
    return repo


def am(repo: Path, patch_file: Path) -> None:
    git("am", "-q", "-k", patch_file.as_posix(), cwd=repo, env=AUTHOR)


def edit(repo: Path, path: str, old: str, new: str) -> None:
    f = repo / path
    text = f.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    f.write_text(text.replace(old, new), encoding="utf-8")


def release_repo(dest: Path, wheel: Path) -> Path:
    """Upstream at the pinned release: the wheel's tree as one commit on main, tagged v0.30.0."""
    dest.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=dest)
    extract_wheel(wheel, dest)
    commit_all(dest, "vllm-omni 0.30.0")
    git("tag", "v0.30.0", cwd=dest)
    return dest


def branch(repo: Path, name: str, start: str = "v0.30.0") -> None:
    git("checkout", "-q", "-B", name, start, cwd=repo)


def make_next_upstreams(repo: Path) -> None:
    """Branches `merged`, `renamed` and `reverted` of the release repository."""
    branch(repo, "merged")
    am(repo, patch("0001"))  # verbatim: its patch-id is in the history ...
    sin, rest = "        sin: torch.Tensor,", "\n    ) -> torch.Tensor:\n        if cos.dim"
    edit(repo, ROPE, sin + rest, sin + "  # (S, D/2) or (B, S, 1, D/2)" + rest)
    # ... and a later edit of its context stops reverse-apply
    commit_all(repo, "Document the cos/sin layouts")
    # half of 0003: one of its hunks
    third = hunks(patch("0003").read_text(encoding="utf-8"))[2].text
    git("apply", "--index", "-", cwd=repo, stdin=third)
    commit_all(repo, "Build the block table once per step")
    git("apply", "--index", patch("0005").as_posix(), cwd=repo)
    edit(repo, LINGBOT, REPLAY_SERIES, REPLAY_UPSTREAM)
    commit_all(repo, "LingBot replay: paged entry on NPU")  # 0005 in other words
    (repo / CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (repo / CONFIG).write_text(CONFIG_UPSTREAM, encoding="utf-8")
    commit_all(repo, "Add the Ascend SP-4 deploy config")  # 0006 in other words
    (repo / UPSTREAM_TEST).parent.mkdir(parents=True, exist_ok=True)
    (repo / UPSTREAM_TEST).write_text(UPSTREAM_TEST_TEXT, encoding="utf-8")
    commit_all(repo, "tests: host copies in paged attention on CPU")

    branch(repo, "renamed")
    git("mv", LINGBOT, LINGBOT.replace("transformer.py", "lingbot_transformer.py"), cwd=repo)
    for user in ("__init__.py", "dmd_block.py", "pipeline.py"):
        f = repo / Path(LINGBOT).parent / user
        f.write_text(
            f.read_text(encoding="utf-8")
            .replace(".transformer import", ".lingbot_transformer import")
            .replace("lingbot_world.transformer", "lingbot_world.lingbot_transformer"),
            encoding="utf-8",
        )
    commit_all(repo, "Rename the LingBot transformer module")

    branch(repo, "reverted")
    am(repo, patch("0001"))
    git("revert", "--no-edit", "HEAD", cwd=repo, env=AUTHOR)
    git("checkout", "-q", "main", cwd=repo)


# ---- an upstream that carries its own gates: .pre-commit-config.yaml and a local hook in tools/
# ----

NPU_IMPORT_HOOK = "torch-npu-only-in-platforms"
UNSERVED_HOOK = "npu-style"  # a remote hook repository the package registry does not serve
# The local hook, written for these tests: torch_npu may be imported only by the platform layer.
NPU_IMPORT_TOOL = '''\
"""Fail on each import of torch_npu in a file outside vllm_omni/platforms/."""
import ast
import sys

failed = False
for name in sys.argv[1:]:
    if name.startswith("vllm_omni/platforms/"):
        continue
    with open(name, encoding="utf-8") as f:
        module = ast.parse(f.read(), name)
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [node.module or ""]
        else:
            continue
        if any(t.split(".")[0] == "torch_npu" for t in targets):
            print(f"{name}:{node.lineno}: torch_npu is imported outside vllm_omni/platforms/")
            failed = True
sys.exit(1 if failed else 0)
'''
TRAILING = """\
  - repo: https://github.com/pre-commit/pre-commit-hooks
    rev: v6.0.0
    hooks:
      - id: trailing-whitespace
"""
GATES_DROPPED = f"repos:\n{TRAILING}"
SIGNOFF = """\
      - id: signoff-commit
        name: Sign off
        entry: git interpret-trailers --in-place --trailer sign
        language: system
        stages: [commit-msg]
"""


def gated_config(deps: tuple[str, ...] = ()) -> str:
    """The config with the local import hook (its additional_dependencies: deps) and the unserved
    remote one."""
    extra = f"        additional_dependencies: [{', '.join(deps)}]\n" if deps else ""
    return f"""repos:
{TRAILING}  - repo: https://git.example.org/npu-lint/npu-style-hooks
    rev: v0.3.1
    hooks:
      - id: {UNSERVED_HOOK}
        files: ^vllm_omni/
  - repo: local
    hooks:
      - id: {NPU_IMPORT_HOOK}
        name: torch_npu only in the platform layer
        entry: python tools/check_npu_import.py
        language: python
        types: [python]
{extra}{SIGNOFF}"""


def add_gates(
    repo: Path, config: str, message: str = "Add pre-commit gates", tool: str = NPU_IMPORT_TOOL
) -> str:
    """Commit config as the repository's .pre-commit-config.yaml (and the local hook's tool); the
    commit."""
    (repo / "tools").mkdir(exist_ok=True)
    (repo / "tools" / "check_npu_import.py").write_text(tool, encoding="utf-8")
    (repo / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    return commit_all(repo, message)


def git_pin(kit_pin: str, url: Path, commit: str) -> str:
    """A kit's pin text moved to the git source at commit of url (the wheel fields kept, as a move
    keeps them)."""
    text = kit_pin.replace('source = "wheel"', 'source = "git"')
    text = re.sub(r'(?m)^url = ".*"$', f'url = "{url}"', text)
    return re.sub(r'(?m)^commit = ".*"$', f'commit = "{commit}"', text)


# ---- the stack's own check, with the leg run as a real pytest in this interpreter ----------------

CHECK_ARGS = argparse.Namespace(open=False, onto=None, push_to=None, force=False, threeway=False)


def pytest_here(_ws: object, leg: str, tree: Path, tests: list[str]) -> tuple[bool, str]:
    """A real pytest run of a PR's tests on its prefix tree, in this interpreter (the legs' own
    interpreters are the heavy tier's): the runner --check-stack is given in the default tier."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    ]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    tail = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return proc.returncode == 0, f"leg {leg}: {tail}"


def checked_stack(kit: Workspace, identity: str) -> None:
    """The stack checked (each PR's own tests on its base, recorded): what a push needs first."""
    assert revision.check_stack(kit, CHECK_ARGS, identity, legs=("stock",), runner=pytest_here) == 0
