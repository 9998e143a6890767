"""Upstream's own CPU tests in a leg: chosen from the touched modules, run on pristine and
patched; a test that passes on pristine and fails on patched is a regression, named."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import KIT_ROOT, commit_patch

from scripts.checkout.pristine import EXPORTED, export_tree
from scripts.gitcmd import git
from scripts.legs import upstream_tests

TESTS = {
    "pytest.ini": "[pytest]\nmarkers =\n    cpu: CPU tests\n    gpu: GPU tests\n",
    "vllm_omni/__init__.py": "",
    "vllm_omni/attn.py": "def attend(q):\n    return q\n",
    "vllm_omni/other.py": "VALUE = 1\n",
    "tests/test_attn.py": (
        "import pytest\n\nfrom vllm_omni.attn import attend\n\npytestmark = [pytest.mark.cpu]\n\n\n"
        "def test_identity():\n    assert attend(3) == 3\n\n\n"
        "def test_type_kept():\n    assert isinstance(attend(1.5), float)\n\n\n"
        "def test_known_broken_upstream():\n    assert attend(1) == 2\n"
    ),
    "tests/test_attn_gpu.py": "import pytest\nimport vllm_omni.attn\n\npytestmark = [pytest.mark.gpu]\n\n\n"
    "def test_gpu():\n    assert False\n",
    "tests/test_other.py": "import pytest\nimport vllm_omni.other\n\npytestmark = [pytest.mark.cpu]\n\n\n"
    "def test_other():\n    assert vllm_omni.other.VALUE == 1\n",
}


def run_leg(root: Path, attend_body: str) -> upstream_tests.Comparison | None:
    """The leg on a git upstream with tests/ (pristine) and a series that makes attend `attend_body`
    (patched)."""
    repo, out = root / "repo", root / "out"
    repo.mkdir(parents=True)
    out.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commit_patch(repo, TESTS, "upstream with tests", "upstream")
    export_tree(repo, "HEAD", root / "pristine")
    commit_patch(
        repo, {"vllm_omni/attn.py": f"def attend(q):\n{attend_body}"}, "the series", "series"
    )
    export_tree(repo, "HEAD", root / "patched")
    diff, env = git("diff", "HEAD~1", "HEAD", cwd=repo), {**os.environ, "KIT_NPU_MODE": "none"}
    return upstream_tests.in_leg(
        Path(sys.executable), env, KIT_ROOT, root / "pristine", root / "patched", out, diff
    )


def test_an_export_of_the_same_tree_is_kept_and_another_tree_replaces_it(tmp_path: Path) -> None:
    repo, dest = tmp_path / "repo", tmp_path / "pristine"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    commit_patch(repo, TESTS, "upstream with tests", "upstream")
    export_tree(repo, "HEAD", dest)
    # a file gone since: only a new export would bring it back
    (dest / "vllm_omni" / "other.py").unlink()
    export_tree(repo, "HEAD", dest)
    assert not (dest / "vllm_omni" / "other.py").exists()  # the same tree: kept as it was
    commit_patch(
        repo, {"vllm_omni/attn.py": "def attend(q):\n    return -q\n"}, "the series", "series"
    )
    export_tree(repo, "HEAD", dest)  # another tree: exported whole
    assert (dest / "vllm_omni" / "attn.py").read_text() == "def attend(q):\n    return -q\n"
    assert (dest / "vllm_omni" / "other.py").read_text() == TESTS["vllm_omni/other.py"]
    (dest / EXPORTED).unlink()  # a copy cut short (its stamp is written last): exported again
    (dest / "vllm_omni" / "other.py").unlink()
    export_tree(repo, "HEAD", dest)
    assert (dest / "vllm_omni" / "other.py").is_file()


def test_a_series_that_breaks_an_upstream_test_or_its_collection_is_named(tmp_path: Path) -> None:
    kept = run_leg(
        tmp_path / "kept", "    if q is None:\n        raise ValueError('q')\n    return q\n"
    )
    assert kept is not None
    # imports the touched module, CPU-marked; not gpu, not other
    assert kept.files == ["tests/test_attn.py"]
    assert kept.ok and kept.regressions == [] and kept.passed == 2
    # reported, not counted
    assert kept.both_fail == ["tests.test_attn::test_known_broken_upstream"]
    broken = run_leg(tmp_path / "broken", "    return int(q)\n")
    assert broken is not None and not broken.ok
    assert broken.regressions == ["tests.test_attn::test_type_kept"]
    assert broken.both_fail == ["tests.test_attn::test_known_broken_upstream"]
    assert broken.as_record()["ok"] is False
    uncollected = run_leg(
        tmp_path / "uncollected", "    return q\nraise ImportError('broken by the series')\n"
    )
    assert uncollected is not None and not uncollected.ok and uncollected.regressions


def test_selection_by_module_name_and_none_from_a_wheel_source(tmp_path: Path) -> None:
    tree = tmp_path / "pristine"
    tree.mkdir()
    assert (
        upstream_tests.in_leg(
            Path(sys.executable), dict(os.environ), KIT_ROOT, tree, tree, tmp_path, ""
        )
        is None
    )
    files = {
        "tests/a/test_rope.py": "import pytest\nfrom vllm_omni.diffusion.layers.rope import R\npytest.mark.cpu\n",
        "tests/a/test_ropey.py": "from vllm_omni.diffusion.layers.ropey import R\npytest.mark.cpu\n",
    }
    touched = ["vllm_omni/diffusion/layers/rope.py", "benchmarks/x.yaml"]
    assert upstream_tests.select(files, touched) == ["tests/a/test_rope.py"]
    assert upstream_tests.select(files, ["benchmarks/x.yaml"]) == []


def test_an_interrupt_while_both_trees_run_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C while pristine's and patched's runs are under way: both are stopped, and the interrupt
    # goes on.
    trees = {name: tmp_path / name for name in ("pristine", "patched")}
    for tree in trees.values():
        (tree / "tests").mkdir(parents=True)
        (tree / "tests" / "test_slow.py").write_text(
            "import time\n\n\ndef test_slow():\n    time.sleep(60)\n"
        )
    started: list[subprocess.Popen[bytes]] = []
    # the first wait for a run, with both under way, is cut by Ctrl-C
    interrupts = [KeyboardInterrupt()]

    class Interrupted(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

        def wait(self, timeout: float | None = None) -> int:
            if len(started) == 2 and interrupts:
                raise interrupts.pop()
            return super().wait(timeout)

    monkeypatch.setattr(upstream_tests.subprocess, "Popen", Interrupted)
    env = {**os.environ, "KIT_NPU_MODE": "none"}
    with pytest.raises(KeyboardInterrupt):
        upstream_tests.run_both(
            trees, Path(sys.executable), env, KIT_ROOT, ["tests/test_slow.py"], tmp_path
        )
    assert len(started) == 2 and all(proc.returncode is not None for proc in started)
