"""The NPU branch of AR-Diffusion paged attention on NPU tensors (npu leg: simulated NPU or an Ascend
card), against upstream's ``_reference_paged_attention`` on CPU copies of the same inputs.

CANN 7.0's op page lists fp16 and bf16 only (fp32 came later): the numerics over dtypes run both
beside fp32. The tests that count host syncs (``sync_counter()``) are simulator-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _npu_leg import moved_bytes, record_syncs, sync_counter
from _oracle import paged_attention_call as paged
from _paged_attention import (
    BLOCK,
    BY_NAME,
    DTYPES,
    HEAD_DIM,
    HEADS,
    STAGED,
    TOLERANCE,
    assert_matches,
    blocks_needed,
    gathered_window,
    make_inputs,
    npu_forward_context,
    on,
    reference,
    staged_inputs,
    stubbed_kernel,  # noqa: F401  (fixture)
)

pytestmark = [
    pytest.mark.npu_leg,
    pytest.mark.core_model,
    pytest.mark.npu,
    pytest.mark.needs_patches("paged-attention-npu"),
]

# Production (LingBot-World serves bf16) and fp32, for the tests that are not about numerics over
# dtypes.
SERVED = ["fp32", "bf16"]
# Host syncs per NPU attention call: none with host lengths (what prepare() and direct replay make
# on NPU), for any batch size; one read-back per length tensor left on the device.
HOST_LENGTHS = ("query_start_loc", "seq_lens")
HOST_LENGTHS_SYNCS = 0
DEVICE_LENGTHS_SYNCS = 2


# -- numerics over geometries --------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("name", list(BY_NAME))
def test_npu_paged_attention_equals_reference(
    name: str, dtype_name: str, npu_device: torch.device
) -> None:
    inputs = make_inputs(BY_NAME[name], DTYPES[dtype_name])
    out = paged(on(npu_device, inputs))
    assert_matches(out, reference(inputs), dtype_name, npu_device)


@pytest.mark.parametrize("dtype_name", SERVED)
@pytest.mark.parametrize("name", list(BY_NAME))
def test_host_seq_lens_give_the_same_result(
    name: str, dtype_name: str, npu_device: torch.device
) -> None:
    # prepare() keeps seq_lens on the host for NPU targets; the result must not depend on where they
    # are.
    inputs = make_inputs(BY_NAME[name], DTYPES[dtype_name])
    on_device = paged(on(npu_device, inputs))
    on_host = paged(on(npu_device, inputs, host=("seq_lens",)))
    assert torch.equal(on_host.cpu(), on_device.cpu())


@pytest.mark.parametrize("dtype_name", SERVED)
def test_padding_blocks_are_never_read(dtype_name: str, npu_device: torch.device) -> None:
    # Point the table's padding at a block full of huge values instead of the null block: a path
    # that reads past the KV length (missing truncation, wrong axis) changes the result.
    inputs = make_inputs(BY_NAME["block16_kv_not_block_multiple"], DTYPES[dtype_name])
    spare = inputs["key_cache"].shape[0] - 1  # unreferenced by make_inputs
    inputs["key_cache"][spare] = 30.0
    inputs["value_cache"][spare] = 1e4
    row = inputs["block_table"][0]
    row[blocks_needed(int(inputs["seq_lens"][0]), 16) :] = spare
    out = paged(on(npu_device, inputs))
    assert_matches(out, reference(inputs), dtype_name, npu_device)


GATHER_CASES = [
    "block16_kv_not_block_multiple",
    "block1560_width19_aligned",
    "kv_shorter_than_one_block",
]


@pytest.mark.usefixtures("stubbed_kernel")
@pytest.mark.parametrize("name", GATHER_CASES)
def test_batch1_gathers_exactly_the_visible_blocks_once(
    name: str, npu_device: torch.device
) -> None:
    # The gather is the branch's whole cost: K and V, whole blocks up to the KV length, each written
    # once. An extra block (cut away later), a concatenation of a single sequence or a second copy
    # all cost bandwidth on the card without changing the result, so only a count of the bytes moved
    # sees them.
    geometry = BY_NAME[name]
    inputs = on(npu_device, make_inputs(geometry, torch.bfloat16), host=("seq_lens",))
    kv_len = geometry.seqs[0][1]
    with moved_bytes() as counter:
        paged(inputs)
    per_block = geometry.block_size * geometry.heads * geometry.head_dim * 2
    kv_bytes = 2 * blocks_needed(kv_len, geometry.block_size) * per_block
    # at most: the block ids cast to int64 once
    index_bytes = blocks_needed(kv_len, geometry.block_size) * 8
    assert kv_bytes <= counter.bytes <= kv_bytes + index_bytes


@pytest.mark.usefixtures("stubbed_kernel")
def test_batch2_gathers_each_visible_token_once(npu_device: torch.device) -> None:
    # Two sequences: one gather per K and V writes both back to back, as TND packs them.
    # Per-sequence gathers joined by torch.cat would write every byte twice (and whole blocks),
    # which only a count of bytes sees.
    geometry = BY_NAME["two_sequences_different_lengths"]
    inputs = on(npu_device, make_inputs(geometry, torch.bfloat16), host=HOST_LENGTHS)
    with moved_bytes() as counter:
        paged(inputs)
    kv_lens = [kv_len for _, kv_len in geometry.seqs]
    kv_bytes = 2 * sum(kv_lens) * geometry.heads * geometry.head_dim * 2
    # The token ids: one int32 table lookup and its int64 cast per row up to the longest, then the
    # packed ids.
    index_bytes = len(kv_lens) * max(kv_lens) * (4 + 8) + sum(kv_lens) * 8
    assert kv_bytes <= counter.bytes <= kv_bytes + index_bytes


@pytest.mark.parametrize("dtype_name", SERVED)
def test_two_sequences_do_not_see_each_other(dtype_name: str, npu_device: torch.device) -> None:
    # Each sequence alone must give its own rows of the two-sequence call (cumulative lengths).
    geometry = BY_NAME["two_sequences_different_lengths"]
    both = make_inputs(geometry, DTYPES[dtype_name])
    out = paged(on(npu_device, both)).cpu()
    for row, (q_len, kv_len) in enumerate(geometry.seqs):
        q0 = int(both["query_start_loc"][row])
        alone = dict(both)
        alone.update(
            query=both["query"][q0 : q0 + q_len],
            block_table=both["block_table"][row : row + 1],
            query_start_loc=torch.tensor([0, q_len], dtype=torch.int32),
            seq_lens=torch.tensor([kv_len], dtype=torch.int32),
            max_query_len=q_len,
        )
        atol, rtol = TOLERANCE[dtype_name]
        torch.testing.assert_close(
            out[q0 : q0 + q_len], paged(on(npu_device, alone)).cpu(), atol=atol, rtol=rtol
        )


# -- history staging
# --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize(
    "staging",
    [
        "off",
        "on",
        pytest.param("zero_size", marks=pytest.mark.needs_patches("npu-empty-stage-buffers")),
    ],
)
def test_staging_modes_equal_reference(
    staging: str, dtype_name: str, npu_device: torch.device
) -> None:
    geometry = BY_NAME["block16_partial_null_padded"]
    inputs = make_inputs(geometry, DTYPES[dtype_name])
    extra: dict[str, Any] = {}
    if staging != "off":
        # capacity may exceed the window
        rows = 0 if staging == "zero_size" else inputs["max_seq_len"] + 16
        buffers = [
            torch.zeros(rows, geometry.heads, geometry.head_dim, dtype=DTYPES[dtype_name])
            for _ in "kv"
        ]
        extra = {"stage_key": buffers[0].to(npu_device), "stage_value": buffers[1].to(npu_device)}
    out = paged(on(npu_device, inputs), **extra)
    assert_matches(out, reference(inputs), dtype_name, npu_device)


@pytest.mark.parametrize("dtype_name", SERVED)
def test_staging_fills_the_window_and_leaves_the_rest(
    dtype_name: str, npu_device: torch.device
) -> None:
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16 + 16, dtype_name)
    out = paged(on(npu_device, inputs), stage_key=stage_key, stage_value=stage_value)
    assert_matches(out, reference(inputs), dtype_name, npu_device)
    window = inputs["max_seq_len"]
    assert torch.equal(stage_key.cpu()[:window], gathered_window(inputs))
    assert (stage_key.cpu()[window:] == -7.0).all() and (stage_value.cpu()[window:] == -7.0).all()


@pytest.mark.parametrize("dtype_name", SERVED)
def test_reused_history_restages_only_the_current_chunk(
    dtype_name: str, npu_device: torch.device
) -> None:
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, dtype_name)
    device_inputs = on(npu_device, inputs)
    # full stage, as a first layer call would
    paged(device_inputs, stage_key=stage_key, stage_value=stage_value)
    # The current chunk (visible block 2) gets new K/V; history blocks 0-1 are already staged.
    current = int(inputs["block_table"][0, 2])
    inputs["key_cache"][current] = torch.randn(16, STAGED.heads, STAGED.head_dim).to(
        DTYPES[dtype_name]
    )
    device_inputs["key_cache"][current] = inputs["key_cache"][current].to(npu_device)
    out = paged(
        device_inputs,
        stage_key=stage_key,
        stage_value=stage_value,
        reuse_history=True,
        current_tokens=16,
        stage_first_block=2,
    )
    assert_matches(out, reference(inputs), dtype_name, npu_device)
    # Reuse must not re-gather the history: poisoned history rows stay as they are.
    stage_key[:32] = 99.0
    paged(
        device_inputs,
        stage_key=stage_key,
        stage_value=stage_value,
        reuse_history=True,
        current_tokens=16,
        stage_first_block=2,
    )
    assert (stage_key.cpu()[:32] == 99.0).all()
    assert torch.equal(stage_key.cpu()[32:48], inputs["key_cache"][current])


@pytest.mark.usefixtures("stubbed_kernel")
@pytest.mark.parametrize("dtype_name", SERVED)
def test_staging_gathers_only_the_window_of_a_wider_table(
    dtype_name: str, npu_device: torch.device
) -> None:
    # The realtime block table runs past the staged window (the action block, unused capacity).
    # Staging gathers the window's blocks and nothing more: one block beyond it costs bandwidth on
    # every layer and step, and with spare buffer capacity it also lands past the window.
    window_blocks = 3  # of the table's 5
    inputs, stage_key, stage_value = staged_inputs(npu_device, STAGED.width * 16, dtype_name)
    inputs["max_seq_len"] = window_blocks * 16
    device_inputs = on(npu_device, inputs, host=("seq_lens",))
    with moved_bytes() as counter:
        paged(device_inputs, stage_key=stage_key, stage_value=stage_value)
    window_bytes = (
        2 * window_blocks * 16 * STAGED.heads * STAGED.head_dim * DTYPES[dtype_name].itemsize
    )
    # + the block ids cast to int64
    assert window_bytes <= counter.bytes <= window_bytes + window_blocks * 8
    beyond = window_blocks * 16
    assert (stage_key.cpu()[beyond:] == -7.0).all() and (stage_value.cpu()[beyond:] == -7.0).all()


# -- the realtime path: forward context -> fused custom op
# -------------------------------------------


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.needs_patches("npu-empty-stage-buffers")
@pytest.mark.usefixtures("npu_dispatch_rejects_none")
def test_history_staging_disabled_gives_zero_size_npu_buffers(
    dtype_name: str, npu_device: torch.device
) -> None:
    ctx = npu_forward_context(npu_device, DTYPES[dtype_name])
    ctx.prepare(npu_device, 0, 2 * BLOCK)
    stage_key, stage_value = ctx.history_staging(0)
    for buffer in (stage_key, stage_value):
        assert isinstance(buffer, torch.Tensor), (
            "None is rejected by NPU eager dispatch for mutable arguments before torch 2.13"
        )
        assert buffer.device == npu_device
        assert tuple(buffer.shape) == (0, HEADS, HEAD_DIM) and buffer.dtype == DTYPES[dtype_name]
    assert stage_key is not stage_value


def test_history_staging_disabled_gives_none_on_npu_from_torch_2_13(
    npu_device: torch.device,
) -> None:
    # The leg's torch (2.13) takes None for the fused op's mutable stage arguments: none are made.
    assert torch.__version__ >= "2.13"
    ctx = npu_forward_context(npu_device)
    ctx.prepare(npu_device, 0, 2 * BLOCK)
    assert ctx.history_staging(0) == (None, None)


def op_call(
    inputs: Any, query: torch.Tensor, k_curr: torch.Tensor, v_curr: torch.Tensor
) -> torch.Tensor:
    return torch.ops.vllm_omni.ar_diffusion_paged_write_attn(
        query,
        k_curr,
        v_curr,
        None,
        None,
        inputs.key_pool,
        inputs.value_pool,
        inputs.block_size,
        inputs.video_slots,
        inputs.action_slots,
        inputs.block_table,
        inputs.query_start_loc,
        inputs.seq_lens,
        inputs.max_query_len,
        inputs.max_seq_len,
        HEAD_DIM**-0.5,
        inputs.stage_key,
        inputs.stage_value,
        inputs.reuse_history,
        inputs.stage_first_block,
    )


@pytest.mark.parametrize("dtype_name", SERVED)
@pytest.mark.needs_patches("npu-empty-stage-buffers")
@pytest.mark.usefixtures("npu_dispatch_rejects_none")
def test_fused_op_takes_zero_size_stage_buffers_end_to_end(
    dtype_name: str, npu_device: torch.device
) -> None:
    ctx = npu_forward_context(npu_device, DTYPES[dtype_name])
    ctx.prepare(npu_device, 0, 2 * BLOCK)
    inputs = ctx.layer_inputs(0)
    assert inputs.stage_key is not None and inputs.stage_key.numel() == 0
    g = torch.Generator().manual_seed(11)
    query, k_curr, v_curr = (
        torch.randn(2 * BLOCK, HEADS, HEAD_DIM, generator=g).to(DTYPES[dtype_name])
        for _ in range(3)
    )
    # Expected: write the chunk into CPU copies of the pools, then the reference over the same
    # table.
    key_pool, value_pool = inputs.key_pool.cpu(), inputs.value_pool.cpu()
    slots = inputs.video_slots.cpu()
    key_pool[slots], value_pool[slots] = k_curr, v_curr
    expected = reference(
        {
            "query": query,
            "key_cache": key_pool.unflatten(0, (-1, BLOCK)),
            "value_cache": value_pool.unflatten(0, (-1, BLOCK)),
            "block_table": inputs.block_table.cpu(),
            "query_start_loc": inputs.query_start_loc.cpu(),
            "seq_lens": inputs.seq_lens.cpu(),
            "softmax_scale": HEAD_DIM**-0.5,
        }
    )
    out = op_call(inputs, query.to(npu_device), k_curr.to(npu_device), v_curr.to(npu_device))
    assert_matches(out, expected, dtype_name, npu_device)
    assert torch.equal(inputs.key_pool.cpu(), key_pool), (
        "the op must write the chunk into the NPU pool"
    )


@pytest.mark.needs_patches("npu-usp4-eager-config")
def test_deploy_config_stays_eager(checkout_root: Path) -> None:
    # npu_fusion_attention does not support graph mode (op-plugin docs: 暂不支持图模式), and actual_seq_*
    # are host lists read per call: the series' deploy config must not capture graphs.
    import yaml

    config = yaml.safe_load(
        (checkout_root / "benchmarks/lingbot_world/configs/npu_usp4_eager.yaml").read_text()
    )
    stage = config["stages"][0]
    assert stage["enforce_eager"] is True
    assert stage["model_config"]["ar_diffusion_kv_config"]["warmup_cudagraph"] is False


# -- host<->device traffic
# ----------------------------------------------------------------------------


@pytest.mark.simulator_only
def test_to_device_async_pins_and_copies_non_blocking_for_npu(
    npu_device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import _to_device_async

    # Works on the real torch_npu too: watch which copies the helper asks for.
    asked: list[tuple[bool, bool]] = []
    real_to = torch.Tensor.to

    def watching_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.device.type == "cpu":
            asked.append((self.is_pinned(), bool(kwargs.get("non_blocking", False))))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", watching_to)
    host = torch.arange(6, dtype=torch.int32)
    out = _to_device_async(host, npu_device)
    monkeypatch.undo()
    assert out.device == npu_device and torch.equal(out.cpu(), host)
    assert asked == [(True, True)], "NPU targets must be copied from pinned memory, non_blocking"
    sim = sync_counter()
    with sim.count_syncs() as seen:
        _to_device_async(host, npu_device)
    assert [copy.asynchronous for copy in seen.h2d] == [True] and seen.total == 0


@pytest.mark.simulator_only
def test_prepare_copies_metadata_asynchronously(npu_device: torch.device) -> None:
    sim = sync_counter()
    ctx = npu_forward_context(npu_device)
    with sim.count_syncs() as seen:
        ctx.prepare(npu_device, 0, 2 * BLOCK)
    # Slot mapping and block table go to the NPU; query_start_loc and seq_lens stay on the host.
    assert len(seen.h2d) >= 2 and seen.blocking_h2d == 0, seen.h2d
    assert seen.total == 0, dict(seen.by_kind)
    assert ctx.query_start_loc.device.type == "cpu" and ctx.seq_lens.device.type == "cpu"
    assert ctx.block_table.device == npu_device


@pytest.mark.simulator_only
def test_syncs_per_realtime_layer_call(npu_device: torch.device) -> None:
    ctx = npu_forward_context(npu_device)
    ctx.prepare(npu_device, 0, 2 * BLOCK)
    inputs = ctx.layer_inputs(0)
    chunk = [torch.randn(2 * BLOCK, HEADS, HEAD_DIM).to(npu_device) for _ in range(3)]
    sim = sync_counter()
    with sim.count_syncs() as seen:
        op_call(inputs, *chunk)
    record_syncs(
        "realtime layer: fused write+attend op, prepare() metadata, batch 1",
        seen.total,
        by_kind=dict(seen.by_kind),
        blocking_h2d=seen.blocking_h2d,
    )
    assert seen.total == HOST_LENGTHS_SYNCS, dict(seen.by_kind)
    assert seen.blocking_h2d == 0


@pytest.mark.parametrize(
    ("scenario", "name", "host", "limit"),
    [
        (
            "entry: batch 1, host lengths",
            "block1560_width19_aligned",
            HOST_LENGTHS,
            HOST_LENGTHS_SYNCS,
        ),
        (
            "entry: batch 2, host lengths",
            "two_sequences_different_lengths",
            HOST_LENGTHS,
            HOST_LENGTHS_SYNCS,
        ),
        # Not made by the tree on NPU (prepare() and direct replay keep both on the host): one
        # read-back each.
        (
            "entry: batch 1, lengths on the device",
            "block1560_width19_aligned",
            (),
            DEVICE_LENGTHS_SYNCS,
        ),
        (
            "entry: batch 2, lengths on the device",
            "two_sequences_different_lengths",
            (),
            DEVICE_LENGTHS_SYNCS,
        ),
    ],
)
@pytest.mark.simulator_only
def test_syncs_per_entry_call(
    scenario: str, name: str, host: tuple[str, ...], limit: int, npu_device: torch.device
) -> None:
    device_inputs = on(npu_device, make_inputs(BY_NAME[name], torch.bfloat16), host=host)
    sim = sync_counter()
    with sim.count_syncs() as seen:
        paged(device_inputs)
    record_syncs(scenario, seen.total, by_kind=dict(seen.by_kind), blocking_h2d=seen.blocking_h2d)
    assert seen.total == limit, dict(seen.by_kind)
    assert seen.blocking_h2d == 0


def test_causal_is_refused_on_npu(npu_device: torch.device) -> None:
    # Like the reference: AR-Diffusion self-attention is non-causal, and the NPU branch has no
    # causal mask.
    inputs = on(npu_device, make_inputs(BY_NAME["block16_partial_null_padded"], torch.float32))
    with pytest.raises(NotImplementedError, match="causal=False"):
        paged(inputs, causal=True)
