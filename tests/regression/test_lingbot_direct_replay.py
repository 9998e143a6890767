"""LingBotSelfAttention direct replay on CPU still takes the dense fallback, unchanged."""

from __future__ import annotations

import _oracle
import pytest
import torch

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.fixture(scope="module")
def attention():
    return _oracle.build_lingbot_self_attention()


@pytest.fixture
def dense_calls(attention, monkeypatch):
    """Count dense-layer calls and make the paged entry fail loudly if CPU ever reaches it."""
    from vllm_omni.diffusion.models.lingbot_world import transformer

    def paged_entry_on_cpu(*args, **kwargs):
        raise AssertionError("direct replay on CPU took the paged attention entry")

    monkeypatch.setattr(transformer, "ar_diffusion_paged_attention", paged_entry_on_cpu)
    calls = []
    handle = attention.attn.register_forward_hook(
        lambda module, args, output: calls.append(args[0].device.type)
    )
    yield calls
    handle.remove()


def test_direct_replay_reaches_dense_fallback_and_equals_pristine(
    attention, dense_calls, pristine_results
):
    out = _oracle.lingbot_direct_replay(attention, rope_2d=False)
    assert dense_calls == ["cpu", "cpu"]
    for key, value in out.items():
        expected = pristine_results[f"lingbot/{key}"]
        assert torch.isfinite(value).all(), key
        assert torch.equal(value, expected), key


@pytest.mark.needs_patches("rope-2d-cos-sin")
def test_direct_replay_with_2d_rope_tables(attention, dense_calls):
    # LingBot-World hands the attention 2-D (S, D/2) tables; with the rope fix they must give
    # exactly what the expanded 4-D tables give, through the whole layer.
    out_2d = _oracle.lingbot_direct_replay(attention, rope_2d=True)
    out_4d = _oracle.lingbot_direct_replay(attention, rope_2d=False)
    assert dense_calls == ["cpu"] * 4
    for key in out_4d:
        assert torch.equal(out_2d[key], out_4d[key]), key
