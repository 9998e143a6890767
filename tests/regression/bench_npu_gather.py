"""Benchmark of the NPU paged-attention path at LingBot-World's shipped geometry (pytest-benchmark).

Not collected by the legs (not ``test_*.py``); run it in the npu leg's environment
(docs/results.md). Measures: the gather (whole-block ``index_select`` per K and V, as the NPU branch
does, against the reference's per-token indexing; into a fresh tensor, into a reused destination as
the NPU allocator gives, and against a plain copy of the same bytes); bytes moved per realtime chunk
with history staging off and on; host syncs and bytes per call, batch 1 and 2, lengths where
``build_block_table`` puts them for an NPU target; and the extra memory one call allocates (the
pristine tree sends NPU queries to the fp32 reference, which materialises (heads, q, kv) scores).
Simulated NPU: timings are CPU timings, only their ratios compare; on a real NPU it times the card.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _npu_leg import moved_bytes
from _paged_attention import stubbed_kernel  # noqa: F401  (fixture)
from npu_standin import simulated_npu

pytestmark = [pytest.mark.npu_leg, pytest.mark.benchmark]

# Shipped LingBot-World geometry per rank under Ulysses SP-4 at 480x832 (docs/upstream-facts.md).
BLOCK, WIDTH, HEADS, HEAD_DIM, QUERY = 1560, 19, 10, 128, 4680
KV_LEN = 18 * BLOCK  # a full visible window; the table's last entry is the action-capacity block
FIGURES: dict[str, Any] = {}


def gather_inputs(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(0)
    cache = torch.randn(WIDTH + 1, BLOCK, HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
    table = (torch.randperm(WIDTH, generator=g) + 1).to(torch.int32).unsqueeze(0)
    return cache.to(device), table.to(device), KV_LEN


def whole_block_gather(
    cache: torch.Tensor, table: torch.Tensor, kv_len: int, out: Any = None
) -> torch.Tensor:
    """What the NPU branch does: whole blocks, flattened to tokens, cut to the KV length (into ``out``
    if given)."""
    ids = table[0, : -(-kv_len // BLOCK)].to(torch.long)
    return torch.index_select(cache, 0, ids, out=out).flatten(0, 1)[:kv_len]


def per_token_gather(cache: torch.Tensor, table: torch.Tensor, kv_len: int) -> torch.Tensor:
    """What the reference path does: one (block, offset) pair per token."""
    positions = torch.arange(kv_len, device=cache.device)
    blocks = table[0, torch.div(positions, BLOCK, rounding_mode="floor")].long()
    return cache[blocks, positions % BLOCK]


def synchronized(
    fn: Callable[..., torch.Tensor], device: torch.device
) -> Callable[..., torch.Tensor]:
    def run(*args: Any) -> torch.Tensor:
        out = fn(*args)
        if device.type == "npu" and simulated_npu.installed() is None:
            torch.npu.synchronize()  # time the card's work, not the launch
        return out

    return run


@pytest.mark.benchmark(group="gather-shipped-geometry")
@pytest.mark.parametrize("method", ["whole_block_reused_destination", "plain_copy_same_bytes"])
def test_gather_into_reused_memory(method: str, benchmark: Any, npu_device: torch.device) -> None:
    cache, table, kv_len = gather_inputs(npu_device)
    blocks = -(-kv_len // BLOCK)
    dest = torch.empty(blocks, BLOCK, HEADS, HEAD_DIM, dtype=cache.dtype, device=npu_device)
    if method == "plain_copy_same_bytes":
        source = cache[1 : blocks + 1]  # contiguous: the same bytes as the gather, no indexing

        def fn(*_: Any) -> torch.Tensor:
            return dest.copy_(source)
    else:
        fn = functools.partial(whole_block_gather, out=dest)
    benchmark.pedantic(
        synchronized(fn, npu_device), args=(cache, table, kv_len), rounds=7, warmup_rounds=1
    )
    if method != "plain_copy_same_bytes":
        assert torch.equal(
            dest.flatten(0, 1)[:kv_len].cpu(), per_token_gather(cache.cpu(), table.cpu(), kv_len)
        )
    FIGURES[f"gather_{method}_median_s"] = benchmark.stats.stats.median
    FIGURES["gather_bytes_per_window"] = dest.numel() * dest.element_size()


# -- bytes moved per realtime chunk, staging off and on
# ----------------------------------------------


def moved_by_call(npu_device: torch.device, stage: bool, reuse: bool) -> int:
    """Bytes one layer call of the patched entry moves at the shipped geometry (kernel stubbed)."""
    from vllm_omni.experimental.ar_diffusion.kv_cache import paged_attention as pa

    cache, table, kv_len = gather_inputs(npu_device)
    values = cache.clone()
    query = torch.zeros(QUERY, HEADS, HEAD_DIM, dtype=torch.bfloat16, device=npu_device)
    extra: dict[str, Any] = {}
    if stage:
        window = torch.zeros(
            WIDTH * BLOCK, HEADS, HEAD_DIM, dtype=torch.bfloat16, device=npu_device
        )
        current_blocks = QUERY // BLOCK
        extra = dict(
            stage_key=window,
            stage_value=window.clone(),
            reuse_history=reuse,
            current_tokens=QUERY,
            stage_first_block=kv_len // BLOCK - current_blocks,
        )
    q_loc = torch.tensor([0, QUERY], dtype=torch.int32, device=npu_device)
    # on the host, as prepare() keeps it on NPU
    seq_lens = torch.tensor([kv_len], dtype=torch.int32)
    with moved_bytes() as counter:
        pa.ar_diffusion_paged_attention(
            query,
            cache,
            values,
            block_table=table,
            query_start_loc=q_loc,
            seq_lens=seq_lens,
            max_query_len=QUERY,
            max_seq_len=kv_len,
            softmax_scale=HEAD_DIM**-0.5,
            **extra,
        )
    return counter.bytes


@pytest.mark.usefixtures("stubbed_kernel")
def test_bytes_moved_per_chunk_with_staging_off_and_on(npu_device: torch.device) -> None:
    steps = 4  # denoising steps per chunk (num_inference_steps in the deploy config)
    off = moved_by_call(npu_device, stage=False, reuse=False)
    # first step of a chunk: the whole window
    full = moved_by_call(npu_device, stage=True, reuse=False)
    # later steps: only the current chunk's blocks
    reused = moved_by_call(npu_device, stage=True, reuse=True)
    window_kv = 2 * KV_LEN * HEADS * HEAD_DIM * 2
    assert off >= window_kv and full >= window_kv and reused < full  # the count sees the gathers
    FIGURES.update(
        moved_bytes_per_layer_call_staging_off=off,
        moved_bytes_per_layer_call_staging_on_full=full,
        moved_bytes_per_layer_call_staging_on_reused=reused,
        moved_bytes_per_layer_per_chunk_staging_off=steps * off,
        moved_bytes_per_layer_per_chunk_staging_on=full + (steps - 1) * reused,
        moved_ratio_off_over_on_per_chunk=steps * off / (full + (steps - 1) * reused),
    )


# -- syncs and bytes per call, batch 1 and 2
# --------------------------------------------------------


def where_lengths_go(npu_device: torch.device) -> dict[str, torch.device]:
    """The devices prepare() (build_block_table) gives query_start_loc and seq_lens for an NPU target."""
    import _paged_attention as paged_tests

    ctx = paged_tests.npu_forward_context(npu_device)
    ctx.prepare(npu_device, 0, 2 * paged_tests.BLOCK)
    return {"query_start_loc": ctx.query_start_loc.device, "seq_lens": ctx.seq_lens.device}


def call_figures(npu_device: torch.device, rows: int) -> dict[str, int]:
    """Host syncs and bytes moved by one call of the patched entry (kernel stubbed), ``rows``
    sequences: row r sees the shared history (the tables' first 17 blocks) plus r + 1 blocks of its
    own frames."""
    from vllm_omni.experimental.ar_diffusion.kv_cache import paged_attention as pa

    cache, table, _ = gather_inputs(npu_device)
    history = table[0, :17].cpu().tolist()
    own = table[0, 17:].cpu().tolist()
    kv_lens = [(17 + r + 1) * BLOCK for r in range(rows)]
    padded = [history + own[: r + 1] + [0] * (WIDTH - 18 - r) for r in range(rows)]
    where = where_lengths_go(npu_device)
    q_loc = torch.tensor([QUERY * r for r in range(rows + 1)], dtype=torch.int32).to(
        where["query_start_loc"]
    )
    seq_lens = torch.tensor(kv_lens, dtype=torch.int32).to(where["seq_lens"])
    block_table = torch.tensor(padded, dtype=torch.int32).to(npu_device)
    query = torch.zeros(rows * QUERY, HEADS, HEAD_DIM, dtype=torch.bfloat16, device=npu_device)
    values = cache.clone()
    with simulated_npu.count_syncs() as syncs, moved_bytes() as moved:
        pa.ar_diffusion_paged_attention(
            query,
            cache,
            values,
            block_table=block_table,
            query_start_loc=q_loc,
            seq_lens=seq_lens,
            max_query_len=QUERY,
            max_seq_len=WIDTH * BLOCK,
            softmax_scale=HEAD_DIM**-0.5,
        )
    return {
        "host_syncs": syncs.total,
        "moved_bytes": moved.bytes,
        "visible_kv_bytes": 2 * sum(kv_lens) * HEADS * HEAD_DIM * 2,
    }


@pytest.mark.usefixtures("stubbed_kernel")
def test_syncs_and_bytes_per_call_batch_1_and_2(npu_device: torch.device) -> None:
    if simulated_npu.installed() is None:
        pytest.skip("syncs are counted by the simulated NPU; run it in simulated mode")
    for rows in (1, 2):
        figures = call_figures(npu_device, rows)
        assert figures["moved_bytes"] >= figures["visible_kv_bytes"]  # the count sees the gathers
        FIGURES.update({f"call_batch{rows}_{name}": value for name, value in figures.items()})
        FIGURES[f"call_batch{rows}_moved_over_visible_kv"] = (
            figures["moved_bytes"] / figures["visible_kv_bytes"]
        )
    FIGURES["call_lengths_for_npu_target"] = {
        k: v.type for k, v in where_lengths_go(npu_device).items()
    }


@pytest.mark.benchmark(group="gather-shipped-geometry")
@pytest.mark.parametrize("method", ["whole_block_index_select", "per_token_index"])
def test_gather(method: str, benchmark: Any, npu_device: torch.device) -> None:
    cache, table, kv_len = gather_inputs(npu_device)
    fn = whole_block_gather if method == "whole_block_index_select" else per_token_gather
    out = benchmark.pedantic(
        synchronized(fn, npu_device), args=(cache, table, kv_len), rounds=7, warmup_rounds=1
    )
    assert out.shape == (kv_len, HEADS, HEAD_DIM)
    # same bytes both ways
    assert torch.equal(out.cpu(), per_token_gather(cache.cpu(), table.cpu(), kv_len))
    FIGURES[f"gather_{method}_median_s"] = benchmark.stats.stats.median


# -- memory
# ------------------------------------------------------------------------------------------


def peak_allocated(fn: Callable[[], Any]) -> int:
    """Peak of live bytes allocated while ``fn`` runs, from torch's own allocation events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    del result
    events = sorted(
        (e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start
    )
    live = peak = 0
    for event in events:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def reference_scores_bytes(heads: int, query: int, kv: int) -> int:
    """One fp32 (heads, q, kv) score tensor: what the reference materialises per sequence."""
    return heads * query * kv * 4


def npu_branch_bytes(heads: int, query: int, kv: int, head_dim: int, block: int) -> int:
    """Gathered K and V (whole blocks, bf16) + the kernel's outputs (attention bf16, two (T, N, 8) fp32
    stats)."""
    blocks = -(-kv // block)
    return (
        2 * blocks * block * heads * head_dim * 2
        + query * heads * head_dim * 2
        + 2 * query * heads * 8 * 4
    )


@pytest.mark.usefixtures(
    "stubbed_kernel"
)  # the fused kernel allocates exactly its outputs (its workspace is on-chip)
def test_peak_memory_npu_branch_vs_reference(npu_device: torch.device) -> None:
    if simulated_npu.installed() is None:
        pytest.skip(
            "measured through the simulated NPU (CPU allocation events); run it in simulated mode"
        )
    from vllm_omni.experimental.ar_diffusion.kv_cache import paged_attention as pa

    # Scaled so the CPU reference fits: 2 heads, one frame of queries; block and table as shipped.
    heads, query_len, kv = 2, BLOCK, KV_LEN
    g = torch.Generator().manual_seed(1)
    cache = [
        torch.randn(WIDTH + 1, BLOCK, heads, HEAD_DIM, generator=g).to(torch.bfloat16) for _ in "kv"
    ]
    table = torch.arange(1, WIDTH + 1, dtype=torch.int32).unsqueeze(0)
    query = torch.randn(query_len, heads, HEAD_DIM, generator=g).to(torch.bfloat16)
    q_loc, seq_lens = (
        torch.tensor([0, query_len], dtype=torch.int32),
        torch.tensor([kv], dtype=torch.int32),
    )
    scale = HEAD_DIM**-0.5

    reference = peak_allocated(
        lambda: pa._reference_paged_attention(
            query, *cache, table, q_loc, seq_lens, scale, causal=False
        )
    )
    dev = [t.to(npu_device) for t in (query, *cache, table, q_loc)]
    npu_branch = peak_allocated(
        lambda: pa.ar_diffusion_paged_attention(
            dev[0],
            dev[1],
            dev[2],
            block_table=dev[3],
            query_start_loc=dev[4],
            seq_lens=seq_lens,
            max_query_len=query_len,
            max_seq_len=WIDTH * BLOCK,
            softmax_scale=scale,
        )
    )
    scores = reference_scores_bytes(heads, query_len, kv)
    modelled = npu_branch_bytes(heads, query_len, kv, HEAD_DIM, BLOCK)
    # The measurements must agree with the models that extrapolate them to the shipped geometry.
    assert scores <= reference <= 3 * scores, (reference, scores)
    assert abs(npu_branch - modelled) <= 0.05 * modelled, (npu_branch, modelled)
    shipped_scores = reference_scores_bytes(HEADS, QUERY, KV_LEN)
    shipped_npu = npu_branch_bytes(HEADS, QUERY, KV_LEN, HEAD_DIM, BLOCK)
    FIGURES.update(
        scaled_geometry=f"heads {heads}, q {query_len}, kv {kv}, block {BLOCK}, head_dim {HEAD_DIM}, bf16",
        scaled_reference_peak_bytes=reference,
        scaled_reference_scores_bytes=scores,
        scaled_npu_branch_peak_bytes=npu_branch,
        scaled_ratio_reference_over_npu=reference / npu_branch,
        shipped_reference_fp32_scores_bytes=shipped_scores,
        shipped_reference_peak_estimate_bytes=round(shipped_scores * reference / scores),
        shipped_npu_branch_bytes=shipped_npu,
        shipped_ratio_scores_over_npu=shipped_scores / shipped_npu,
    )


def test_zz_report() -> None:
    """Print the ratios (and write them to $KIT_BENCH_OUT when set); runs last in this file."""
    ratios = {  # name: (numerator, denominator), each a gather method's median
        "per_token_over_whole_block": ("per_token_index", "whole_block_index_select"),
        "reused_over_plain_copy": ("whole_block_reused_destination", "plain_copy_same_bytes"),
        "fresh_over_reused": ("whole_block_index_select", "whole_block_reused_destination"),
    }
    for name, methods in ratios.items():
        num, den = (FIGURES.get(f"gather_{method}_median_s") for method in methods)
        if num and den:
            FIGURES[f"gather_ratio_{name}"] = num / den
    if not FIGURES:
        pytest.skip("no figures: the benchmarks above were deselected")
    print(json.dumps(FIGURES, indent=2, sort_keys=True))
    out = os.environ.get("KIT_BENCH_OUT")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n", encoding="utf-8")
