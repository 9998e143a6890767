"""The series' NPU paged-attention contracts, fast: GQA, strided queries, dtypes, history staging
sequences.

npu leg (simulated and real alike). Small geometries on purpose: ``nox -s mutate`` runs this module
first for the paged-attention file, so such a mutant dies in seconds. fp16 and bf16 wherever
numerics matter, fp32 where cheap.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from _oracle import paged_attention_call as paged
from _paged_attention import (
    BLOCK,
    BY_NAME,
    DTYPES,
    STAGED,
    assert_matches,
    gathered_window,
    make_inputs,
    npu_forward_context,
    on,
    reference,
    staged_inputs,
)

pytestmark = [
    pytest.mark.npu_leg,
    pytest.mark.core_model,
    pytest.mark.npu,
    pytest.mark.needs_patches("paged-attention-npu"),
]

HALF = ["bf16", "fp16"]  # the two dtypes every CANN release's npu_fusion_attention takes


# -- checks up front
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query_dtype", "cache_dtype"), [("bf16", "fp16"), ("fp32", "bf16"), ("fp16", "fp32")]
)
def test_query_and_cache_dtypes_must_match(
    query_dtype: str, cache_dtype: str, npu_device: torch.device
) -> None:
    # The kernel refuses mixed dtypes ("The data type of query, key, value are not equal"): say
    # which two, first.
    inputs = make_inputs(BY_NAME["block16_partial_null_padded"], DTYPES[cache_dtype])
    inputs["query"] = inputs["query"].to(DTYPES[query_dtype])
    expected = f"query is {DTYPES[query_dtype]}, KV cache {DTYPES[cache_dtype]}"
    with pytest.raises(TypeError, match=re.escape(expected)):
        paged(on(npu_device, inputs))


@pytest.mark.parametrize(
    ("current_tokens", "stage_first_block", "message"),
    [
        (0, 2, "block-aligned current chunk, got 0 tokens"),
        (17, 2, "block-aligned current chunk, got 17 tokens"),
        (16, -1, "stage_first_block=-1 + 1 blocks exceeds the 5-block window"),
        (32, 4, "stage_first_block=4 + 2 blocks exceeds the 5-block window"),
    ],
)
def test_reuse_needs_an_aligned_chunk_inside_the_window(
    current_tokens: int, stage_first_block: int, message: str, npu_device: torch.device
) -> None:
    # The CUDA gather path's checks: wrong metadata is a caller bug, never a reason to stage
    # something else.
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, "bf16")
    with pytest.raises(AssertionError, match=re.escape(message)):
        paged(
            on(npu_device, inputs),
            stage_key=stage_key,
            stage_value=stage_value,
            reuse_history=True,
            current_tokens=current_tokens,
            stage_first_block=stage_first_block,
        )


@pytest.mark.parametrize(
    ("current_tokens", "stage_first_block"), [(16, 0), (16, 4), (48, 2), (80, 0)]
)
def test_reused_history_at_the_window_bounds(
    current_tokens: int, stage_first_block: int, npu_device: torch.device
) -> None:
    # The edges the checks must still accept: a chunk at the window's first block, and one ending at
    # its last.
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, "bf16")
    device_inputs = on(npu_device, inputs)
    paged(device_inputs, stage_key=stage_key, stage_value=stage_value)
    out = paged(
        device_inputs,
        stage_key=stage_key,
        stage_value=stage_value,
        reuse_history=True,
        current_tokens=current_tokens,
        stage_first_block=stage_first_block,
    )
    assert_matches(out, reference(inputs), "bf16", npu_device)


def test_reused_history_with_one_token_blocks(npu_device: torch.device) -> None:
    # Block size 1: a one-token current chunk is block-aligned, the smallest chunk the checks must
    # accept.
    geometry = BY_NAME["block1_every_token_a_block"]
    inputs = make_inputs(geometry, torch.bfloat16)
    kv_len = geometry.seqs[0][1]
    inputs["max_seq_len"] = kv_len  # the staged window: the visible tokens, one block each
    buffers = [
        torch.zeros(kv_len, geometry.heads, geometry.head_dim, dtype=torch.bfloat16) for _ in "kv"
    ]
    stage = {"stage_key": buffers[0].to(npu_device), "stage_value": buffers[1].to(npu_device)}
    device_inputs = on(npu_device, inputs)
    paged(device_inputs, **stage)
    out = paged(
        device_inputs, **stage, reuse_history=True, current_tokens=1, stage_first_block=kv_len - 1
    )
    assert_matches(out, reference(inputs), "bf16", npu_device)


def test_staging_is_batch_1_only(npu_device: torch.device) -> None:
    geometry = BY_NAME["two_sequences_different_lengths"]
    inputs = make_inputs(geometry, torch.bfloat16)
    buffers = [
        torch.zeros(inputs["max_seq_len"], geometry.heads, geometry.head_dim, dtype=torch.bfloat16)
        for _ in "kv"
    ]
    with pytest.raises(AssertionError, match="history staging is batch 1 only, got 2 sequences"):
        paged(
            on(npu_device, inputs),
            stage_key=buffers[0].to(npu_device),
            stage_value=buffers[1].to(npu_device),
        )


@pytest.mark.needs_patches("npu-empty-stage-buffers")
@pytest.mark.usefixtures("npu_dispatch_rejects_none")
def test_zero_size_stage_buffers_are_made_once(npu_device: torch.device) -> None:
    # Every layer_inputs() call of every forward gets the same pair: no allocation per layer call.
    first, second = npu_forward_context(npu_device), npu_forward_context(npu_device)
    for ctx in (first, second):
        ctx.prepare(npu_device, 0, 2 * BLOCK)
    pair = first.layer_inputs(0)[-4:-2]
    assert all(a is b for a, b in zip(pair, second.layer_inputs(0)[-4:-2], strict=True))
    assert all(a is b for a, b in zip(pair, first.history_staging(0), strict=True))
    other = npu_forward_context(npu_device, torch.bfloat16)
    other.prepare(npu_device, 0, 2 * BLOCK)
    assert other.history_staging(0)[0].dtype == torch.bfloat16, "one pair per dtype"


@pytest.mark.needs_patches("npu-empty-stage-buffers")
@pytest.mark.usefixtures("npu_dispatch_rejects_none")
def test_zero_size_stage_buffers_follow_the_head_shape_only(npu_device: torch.device) -> None:
    # A pool with fewer slots but the same heads shares the pair; one with other heads gets its own
    # shape.
    base = npu_forward_context(npu_device)
    fewer_slots, more_heads = npu_forward_context(npu_device), npu_forward_context(npu_device)
    fewer_slots.kv_cache._k_pools = [base.kv_cache._k_pools[0][: 8 * BLOCK]]
    pool = base.kv_cache._k_pools[0]
    more_heads.kv_cache._k_pools = [pool.new_zeros(pool.shape[0], 2 * pool.shape[1], pool.shape[2])]
    for ctx in (base, fewer_slots, more_heads):
        ctx.prepare(npu_device, 0, 2 * BLOCK)
    pair = base.history_staging(0)
    assert all(a is b for a, b in zip(pair, fewer_slots.history_staging(0), strict=True))
    assert more_heads.history_staging(0)[0].shape == (0, 2 * pool.shape[1], pool.shape[2])


# -- history staging sequences --------------------------------------------------------------------


def write_block(
    inputs: dict[str, Any], device_inputs: dict[str, Any], block: int, seed: int
) -> None:
    """New K/V for one block, in the CPU inputs and their device copy (a denoising step rewrites the
    chunk)."""
    g = torch.Generator().manual_seed(seed)
    for name in ("key_cache", "value_cache"):
        fresh = torch.randn(STAGED.block_size, STAGED.heads, STAGED.head_dim, generator=g).to(
            inputs[name].dtype
        )
        inputs[name][block] = fresh
        device_inputs[name][block] = fresh.to(device_inputs[name].device)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_staging_sequence_restages_the_window_when_the_history_moves(
    dtype_name: str, npu_device: torch.device
) -> None:
    # Two AR blocks of one session, four denoising steps each, with the arguments
    # _prepare_history_staging gives: step 1 of a block does not reuse (reuse_history=False), steps
    # 2-4 do, and stage_first_block is the history's block count on every step. Between the blocks
    # the window slides by one block, so the first step of the second block must gather the whole
    # window again although stage_first_block says 2.
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, dtype_name)
    device_inputs = on(npu_device, inputs)
    table = inputs["block_table"][0]
    # the next chunk's block
    spare = min(set(range(1, inputs["key_cache"].shape[0])) - set(table.tolist()))
    for ar_block, window in enumerate([table[:3].tolist(), [*table[1:3].tolist(), spare]]):
        inputs["block_table"][0, :3] = torch.tensor(window, dtype=torch.int32)
        device_inputs["block_table"] = inputs["block_table"].to(npu_device)
        for step in range(4):
            write_block(inputs, device_inputs, window[2], seed=10 * ar_block + step)
            out = paged(
                device_inputs,
                stage_key=stage_key,
                stage_value=stage_value,
                reuse_history=step > 0,
                current_tokens=16,
                stage_first_block=2,
            )
            assert_matches(out, reference(inputs), dtype_name, npu_device)
        assert torch.equal(stage_key.cpu()[:48], gathered_window(inputs)[:48]), (
            f"AR block {ar_block}"
        )


# -- geometry: GQA and strided queries ------------------------------------------------------------


GROUP = 4  # query heads per KV head: newer upstream callers run 32 query heads over 8 KV heads
GQA_CASES = [
    "block16_kv_not_block_multiple",
    "two_sequences_different_lengths",
    "block1560_partial_last_block",
]


def with_query_heads(inputs: dict[str, Any], group: int, seed: int = 5) -> dict[str, Any]:
    """The same KV cache and table, with a query of ``group`` times as many heads."""
    query = inputs["query"]
    g = torch.Generator().manual_seed(seed)
    heads = torch.randn(*query.shape[:-2], query.shape[-2] * group, query.shape[-1], generator=g)
    return dict(inputs, query=heads.to(query.dtype))


def gqa_reference(inputs: dict[str, Any], group: int) -> torch.Tensor:
    """GQA as the kernel defines it: query head h reads KV head h // group (K/V heads repeated in
    place)."""
    caches = {
        name: inputs[name].repeat_interleave(group, dim=2) for name in ("key_cache", "value_cache")
    }
    return reference(dict(inputs, **caches))


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name", GQA_CASES)
def test_gqa_query_heads_over_fewer_kv_heads(
    name: str, dtype_name: str, npu_device: torch.device
) -> None:
    inputs = with_query_heads(make_inputs(BY_NAME[name], DTYPES[dtype_name]), GROUP)
    assert inputs["query"].shape[-2] == GROUP * inputs["key_cache"].shape[2]
    out = paged(on(npu_device, inputs))
    assert_matches(out, gqa_reference(inputs, GROUP), dtype_name, npu_device)


@pytest.mark.parametrize("dtype_name", HALF)
def test_gqa_with_history_staging(dtype_name: str, npu_device: torch.device) -> None:
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, dtype_name)
    inputs = with_query_heads(inputs, GROUP)
    out = paged(on(npu_device, inputs), stage_key=stage_key, stage_value=stage_value)
    assert_matches(out, gqa_reference(inputs, GROUP), dtype_name, npu_device)


def strided_query(query: torch.Tensor) -> torch.Tensor:
    """``query`` as one of three heads-interleaved tensors, the view ``all_to_all_5D(...).unbind(2)``
    returns."""
    axis = query.dim() - 2  # (T, 3, H, D) or (B, L, 3, H, D): q, k, v side by side per token
    packed = torch.stack(
        [torch.full_like(query, 50.0), query, torch.full_like(query, -50.0)], dim=axis
    )
    return packed.unbind(axis)[1]


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize(
    "name", ["block16_kv_not_block_multiple", "two_sequences_different_lengths"]
)
def test_strided_query_equals_contiguous(
    name: str, dtype_name: str, npu_device: torch.device
) -> None:
    inputs = make_inputs(BY_NAME[name], DTYPES[dtype_name])
    device_inputs = on(npu_device, inputs)
    query = strided_query(device_inputs["query"])
    assert not query.is_contiguous() and query.device == npu_device
    out = paged(dict(device_inputs, query=query))
    assert_matches(out, reference(inputs), dtype_name, npu_device)
    assert torch.equal(out.cpu(), paged(device_inputs).cpu())
