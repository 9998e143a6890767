"""Inputs, upstream's reference and the stubbed kernel of the paged-attention tests (npu leg): shared
by test_npu_paged_attention.py, test_npu_paged_contracts.py and bench_npu_gather.py."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import _oracle
import pytest
import torch
from _oracle import DTYPES

# (atol, rtol) against upstream's reference. Both compute scores and softmax in fp32 and round the
# probabilities to the input dtype before P.V (as the kernel does); the fp32 summation order
# differs, which can move a value across a rounding boundary: one ulp of the half dtype (its eps).
# fp32: the summation order alone, a few 1e-6.
TOLERANCE = {
    "fp32": (2e-5, 2e-5),
    **{half: (torch.finfo(DTYPES[half]).eps,) * 2 for half in ("bf16", "fp16")},
}


@dataclass(frozen=True)
class Geometry:
    name: str
    block_size: int
    heads: int
    head_dim: int
    seqs: tuple[tuple[int, int], ...]  # (query tokens, kv tokens) per sequence
    width: int  # block-table width; a row's entries past its own blocks are the null block 0
    batched_query: bool = False  # (1, L, H, D) instead of (T, H, D)


GEOMETRIES = [
    # LingBot-World's block (one latent frame, 1560 tokens) and table width (19), with heads,
    # head_dim and query tokens scaled down so the CPU reference stays fast: three full frames
    # visible.
    Geometry("block1560_width19_aligned", 1560, 2, 16, ((390, 3 * 1560),), 19),
    Geometry(
        "block1560_partial_last_block",
        1560,
        2,
        16,
        ((156, 2 * 1560 + 780),),
        19,
        batched_query=True,
    ),
    Geometry("block16_partial_null_padded", 16, 4, 32, ((32, 40),), 6),
    Geometry("block16_kv_not_block_multiple", 16, 2, 32, ((16, 53),), 8, batched_query=True),
    Geometry("block1_every_token_a_block", 1, 2, 8, ((5, 7),), 9),
    Geometry("kv_shorter_than_one_block", 32, 2, 16, ((4, 5),), 3),
    Geometry("two_sequences_different_lengths", 16, 2, 32, ((24, 40), (8, 19)), 4),
    Geometry("two_sequences_block1560", 1560, 2, 8, ((100, 1560 + 100), (390, 2 * 1560 + 5)), 4),
]
BY_NAME = {g.name: g for g in GEOMETRIES}


def blocks_needed(kv_len: int, block_size: int) -> int:
    return -(-kv_len // block_size)


def make_inputs(geometry: Geometry, dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    """CPU inputs shaped as build_block_table shapes them: scattered block ids, null-block padding."""
    g = torch.Generator().manual_seed(seed)
    needed = [blocks_needed(kv, geometry.block_size) for _, kv in geometry.seqs]
    # block 0 is the zeroed null block; two blocks nobody references
    num_blocks = 1 + sum(needed) + 2
    shape = (num_blocks, geometry.block_size, geometry.heads, geometry.head_dim)
    key_cache = torch.randn(shape, generator=g).to(dtype)
    value_cache = torch.randn(shape, generator=g).to(dtype)
    key_cache[0] = 0
    value_cache[0] = 0
    ids = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    table = torch.zeros(len(geometry.seqs), geometry.width, dtype=torch.int32)
    for row, count in enumerate(needed):
        table[row, :count] = torch.tensor(ids[:count], dtype=torch.int32)
        ids = ids[count:]
    q_lens = [q for q, _ in geometry.seqs]
    query = torch.randn(sum(q_lens), geometry.heads, geometry.head_dim, generator=g).to(dtype)
    if geometry.batched_query:
        query = query.unsqueeze(0)
    return {
        "query": query,
        "key_cache": key_cache,
        "value_cache": value_cache,
        "block_table": table,
        "query_start_loc": torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32),
        "seq_lens": torch.tensor([kv for _, kv in geometry.seqs], dtype=torch.int32),
        "max_query_len": max(q_lens),
        "max_seq_len": geometry.width * geometry.block_size,
        "softmax_scale": geometry.head_dim**-0.5,
    }


def on(
    device: torch.device, inputs: dict[str, Any], *, host: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The same inputs with every tensor on ``device``, except the names in ``host``."""
    return {
        k: v.to(device) if isinstance(v, torch.Tensor) and k not in host else v
        for k, v in inputs.items()
    }


def reference(inputs: dict[str, Any]) -> torch.Tensor:
    """Upstream's reference on CPU tensors, shaped like the query."""
    from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import (
        _reference_paged_attention,
    )

    query = inputs["query"]
    out = _reference_paged_attention(
        query.reshape(-1, *query.shape[-2:]),
        inputs["key_cache"],
        inputs["value_cache"],
        inputs["block_table"],
        inputs["query_start_loc"],
        inputs["seq_lens"],
        inputs["softmax_scale"],
        causal=False,
    )
    return out.reshape(query.shape)


def assert_matches(
    out: torch.Tensor, expected: torch.Tensor, dtype_name: str, device: torch.device
) -> None:
    assert out.device == device, "the NPU path must leave the result on the NPU"
    assert out.shape == expected.shape and out.dtype == expected.dtype
    atol, rtol = TOLERANCE[dtype_name]
    torch.testing.assert_close(out.cpu(), expected, atol=atol, rtol=rtol)


def stub_kernel(query: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    stats = query.new_empty(*query.shape[:2], 8, dtype=torch.float32)
    return torch.empty_like(query), stats, torch.empty_like(stats), query.new_empty(0), 0, 0, 0


@pytest.fixture
def stubbed_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused kernel allocates its outputs and does no work: what the branch itself moves is what
    gets counted."""
    import torch_npu

    monkeypatch.setattr(torch_npu, "npu_fusion_attention", stub_kernel)


# 3 visible blocks, 2 padding; block aligned
STAGED = Geometry("staged_block16", 16, 2, 32, ((32, 48),), 5)


def staged_inputs(
    npu_device: torch.device, capacity: int, dtype_name: str
) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor]:
    inputs = make_inputs(STAGED, DTYPES[dtype_name])
    fill = torch.full((capacity, STAGED.heads, STAGED.head_dim), -7.0, dtype=DTYPES[dtype_name])
    return inputs, fill.to(npu_device), fill.clone().to(npu_device)


def gathered_window(inputs: dict[str, Any]) -> torch.Tensor:
    ids = inputs["block_table"][0].long()
    return inputs["key_cache"].index_select(0, ids).flatten(0, 1)


HEADS, HEAD_DIM, BLOCK = 2, 8, 4


def npu_forward_context(npu_device: torch.device, dtype: torch.dtype = torch.float32) -> Any:
    """A forward context over a KV manager whose pools live on the NPU (staging disabled)."""
    manager = _oracle.FakeKVManager(block_size=BLOCK, num_blocks=32, heads=HEADS, head_dim=HEAD_DIM)
    g = torch.Generator().manual_seed(7)
    pools = [torch.randn(32 * BLOCK, HEADS, HEAD_DIM, generator=g).to(dtype) for _ in "kv"]
    for pool in pools:
        pool[:BLOCK] = 0  # the null block
    manager._k_pools, manager._v_pools = [pools[0].to(npu_device)], [pools[1].to(npu_device)]
    return _oracle.forward_context(
        history_block_ids=[3, 1], seq_len=2 * BLOCK, max_video_tokens=6 * BLOCK, kv_cache=manager
    )
