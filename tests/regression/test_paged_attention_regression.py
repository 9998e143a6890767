"""AR-Diffusion paged attention on CPU: unchanged outputs, staging contract and op schema."""

from __future__ import annotations

import _oracle
import pytest
import torch

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

PAGED = [case[0] for case in _oracle.PAGED_CASES]
CONTEXTS = [case[0] for case in _oracle.CONTEXT_CASES]


def _assert_same(patched, pristine, key):
    assert patched.dtype == pristine.dtype and patched.device == pristine.device, key
    assert patched.shape == pristine.shape, key
    assert torch.equal(patched, pristine), key


@pytest.mark.parametrize("name", PAGED)
def test_cpu_paged_attention_equals_pristine(name, patched_results, pristine_results):
    keys = [k for k in pristine_results if k.startswith(f"paged/{name}/")]
    assert keys, f"pristine oracle produced nothing for {name}"
    for key in keys:
        _assert_same(patched_results[key], pristine_results[key], key)


@pytest.mark.parametrize("index", range(len(PAGED)), ids=PAGED)
def test_cpu_paged_attention_matches_dense_attention(index):
    # Independent of both trees' code: gather each sequence's visible tokens and attend densely.
    inputs = _oracle.paged_inputs(index)
    seqs = _oracle.PAGED_CASES[index][6]
    query = inputs["query"].reshape(-1, *inputs["query"].shape[-2:])
    expected, q_start = [], 0
    for row, (q_len, kv_len, _) in enumerate(seqs):
        ids = inputs["block_table"][row].long()
        k = inputs["key_cache"][ids].flatten(0, 1)[:kv_len].float()
        v = inputs["value_cache"][ids].flatten(0, 1)[:kv_len].float()
        q = query[q_start : q_start + q_len].float()
        probs = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) * inputs["softmax_scale"], dim=-1)
        expected.append(torch.einsum("hqk,khd->qhd", probs, v))
        q_start += q_len
    out = _oracle.paged_attention_call(inputs)
    assert out.shape == inputs["query"].shape
    tol = 1e-5 if out.dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        out.reshape(-1, *out.shape[-2:]).float(), torch.cat(expected), atol=tol, rtol=tol
    )


@pytest.mark.parametrize("index", range(len(PAGED)), ids=PAGED)
def test_strided_query_gives_the_same_output(index):
    # Ulysses hands attention a view, not a copy: all_to_all_5D(...).unbind(2) of (.., 3, H, D)
    # q/k/v.
    inputs = _oracle.paged_inputs(index)
    query = inputs["query"]
    axis = query.dim() - 2
    strided = torch.stack([query + 1, query, query - 1], dim=axis).unbind(axis)[1]
    assert not strided.is_contiguous()
    out = _oracle.paged_attention_call(dict(inputs, query=strided))
    assert torch.equal(out, _oracle.paged_attention_call(inputs))


@pytest.mark.parametrize("index", range(len(PAGED)), ids=PAGED)
def test_empty_stage_buffers_read_as_no_staging(index):
    inputs = _oracle.paged_inputs(index)
    key_cache = inputs["key_cache"]
    empty_k, empty_v = (key_cache.new_empty((0, *key_cache.shape[2:])) for _ in "kv")
    out = _oracle.paged_attention_call(inputs, stage_key=empty_k, stage_value=empty_v)
    assert torch.equal(out, _oracle.paged_attention_call(inputs))


def test_custom_op_schema_unchanged(patched_results, pristine_results):
    schema = patched_results["meta/op_schema"]
    assert schema == pristine_results["meta/op_schema"]
    # The staging arguments stay mutable and optional, without defaults.
    assert "Tensor(a16!)? stage_key, Tensor(a17!)? stage_value, bool reuse_history" in schema


@pytest.mark.parametrize("name", CONTEXTS)
def test_cpu_forward_context_metadata_equals_pristine(name, patched_results, pristine_results):
    keys = [k for k in pristine_results if k.startswith(f"context/{name}/")]
    assert keys
    for key in keys:
        _assert_same(patched_results[key], pristine_results[key], key)
    assert patched_results[f"context/{name}/seq_lens"].device.type == "cpu"


def test_staging_disabled_gives_none_on_cpu():
    ctx = _oracle.forward_context(history_block_ids=[1, 2], seq_len=8, max_video_tokens=24)
    ctx.prepare(torch.device("cpu"), 0, 8)
    assert ctx.staging_enabled is False
    assert ctx.history_staging(0) == (None, None)
    inputs = ctx.layer_inputs(0)
    assert inputs.stage_key is None and inputs.stage_value is None


def test_staging_disabled_before_prepare_gives_none_as_upstream():
    # No block table yet (prepare() not run): upstream returns (None, None), and so must the patched
    # context.
    ctx = _oracle.forward_context(history_block_ids=[1, 2], seq_len=8, max_video_tokens=24)
    ctx.staging_enabled = False
    assert ctx.block_table is None
    assert ctx.history_staging(0) == (None, None)


def test_host_to_device_copy_on_cpu_target_is_a_plain_copy():
    from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import _to_device_async

    t = torch.arange(6, dtype=torch.int32)
    out = _to_device_async(t, torch.device("cpu"))
    assert out.device.type == "cpu" and torch.equal(out, t) and not out.is_pinned()
