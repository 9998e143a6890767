"""The stock leg's environment and trees are what the leg claims they are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.mark.stock_leg
def test_stock_torch_has_no_tensor_is_npu():
    # torch_npu generates Tensor.is_npu; stock torch must not have it, so a patch that
    # writes ``tensor.is_npu`` fails here instead of on an Ascend runner only.
    assert not hasattr(torch.Tensor, "is_npu")
    with pytest.raises(AttributeError):
        torch.zeros(1).is_npu  # noqa: B018


@pytest.mark.stock_leg
def test_no_torch_npu_in_the_stock_leg(npu_mode):
    assert npu_mode == "none"
    assert importlib.util.find_spec("torch_npu") is None
    assert not hasattr(torch, "npu")
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


@pytest.mark.pinned_env
def test_vllm_matches_the_pinned_major_minor():
    import vllm

    assert vllm.__version__.split(".")[:2] == ["0", "30"], vllm.__version__


def test_patched_tree_is_the_one_imported(checkout_root: Path):
    import vllm_omni

    assert Path(vllm_omni.__file__).resolve().is_relative_to(checkout_root)


def test_pristine_results_come_from_the_pristine_tree(pristine_results, pristine_root: Path):
    assert Path(pristine_results["meta/vllm_omni_file"]).resolve().is_relative_to(pristine_root)
