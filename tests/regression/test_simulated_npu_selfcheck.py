"""Self-check of the simulated NPU (npu_standin/simulated_npu.py), installed by the npu leg's conftest.

The stock leg imports the module (collecting this file) and must stay without an NPU: installing
would rename PrivateUse1 for the rest of the process. Simulator-only: in mode ``real`` there is no
simulator to check.
"""

from __future__ import annotations

import sys
from itertools import accumulate

import pytest

torch = pytest.importorskip(
    "torch", reason="the simulated NPU needs torch (leg environments have it)"
)

from npu_standin import simulated_npu  # noqa: E402
from npu_standin import torch_npu_schema as npu_schema  # noqa: E402

sim = simulated_npu.installed()
# Deselected by the conftest outside the simulated npu leg.
needs_sim = pytest.mark.simulated_npu
pytestmark = pytest.mark.simulator_only


@pytest.mark.stock_leg
def test_importing_the_module_does_not_install_it() -> None:
    assert "npu_standin.simulated_npu" in sys.modules and simulated_npu.installed() is None
    assert not hasattr(torch.Tensor, "is_npu") and "torch_npu" not in sys.modules


@needs_sim
def test_install_adds_the_npu_backend_once() -> None:
    # The npu leg's conftest installed it before anything imported vllm_omni, at the leg's torch-npu
    # pin.
    import torch_npu

    x = torch.ones(2, device="npu")
    assert (x.is_npu, torch.ones(2).is_npu, str(x.device)) == (True, False, "npu:0")
    assert torch_npu.__version__ == f"{npu_schema.pinned_version()}+simulated"
    assert simulated_npu.install() is sim and sys.modules["torch_npu"] is sim.torch_npu


# -- device behaviour ------------------------------------------------------------------------------


@needs_sim
@pytest.mark.parametrize("device", ["npu", "npu:0", "npu0"])
def test_factories_land_on_npu(device: str) -> None:
    where = torch.device("npu", 0) if device == "npu0" else device
    made = [
        torch.empty(2, 3, device=where),
        torch.zeros(2, device=where),
        torch.ones(2, dtype=torch.bfloat16, device=where),
        torch.full((2,), 7.0, device=where),
        torch.arange(1, 7, 2, device=where),
        torch.tensor([1, 2], device=where),
        torch.randn(3, device=where),
    ]
    assert {(t.device.type, t.device.index, t.is_npu, t.is_cuda) for t in made} == {
        ("npu", 0, True, False)
    }
    assert made[4].cpu().tolist() == [1, 3, 5]
    assert made[3].cpu().tolist() == [7.0, 7.0]


@needs_sim
def test_ops_compute_like_cpu() -> None:
    x = torch.randn(4, 6)
    n = x.npu()
    idx = torch.tensor([3, 0])
    mask = x > 0
    checks = {
        "unflatten": (n.unflatten(-1, (-1, 2)), x.unflatten(-1, (-1, 2))),
        "flatten": (n.flatten(), x.flatten()),
        "slice": (n[1:, ::2], x[1:, ::2]),
        "bool index": (n[mask.npu()], x[mask]),
        "index_select": (n.index_select(0, idx.npu()), x.index_select(0, idx)),
        "cat": (torch.cat([n, n], 1), torch.cat([x, x], 1)),
        "einsum": (torch.einsum("ij,kj->ik", n, n), torch.einsum("ij,kj->ik", x, x)),
        "softmax": (n.softmax(-1), x.softmax(-1)),
        "bf16": (n.to(torch.bfloat16), x.to(torch.bfloat16)),
        "fp16": (n.half(), x.half()),
    }
    for name, (on_npu, on_cpu) in checks.items():
        assert on_npu.device.type == "npu", name
        assert torch.equal(on_npu.cpu(), on_cpu), name
    q = torch.randn(1, 2, 5, 8)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    # SDPA on npu decomposes into math ops, on CPU it may take a fused kernel: equal to fp32
    # rounding.
    torch.testing.assert_close(
        sdpa(q.npu(), q.npu(), q.npu()).cpu(), sdpa(q, q, q), atol=1e-5, rtol=1e-5
    )


@needs_sim
def test_mixing_npu_with_a_cpu_tensor_fails_like_a_real_device() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="npu") + torch.ones(3)
    assert (torch.ones(3, device="npu") + torch.tensor(1.0)).device.type == "npu"


@needs_sim
def test_in_place_writes_reach_the_data() -> None:
    pool = torch.zeros(5, 2, device="npu")
    pool.index_copy_(0, torch.tensor([1, 4], device="npu"), torch.ones(2, 2, device="npu"))
    pool[2:3].copy_(torch.full((1, 2), 5.0))
    assert pool.cpu()[:, 0].tolist() == [0.0, 1.0, 5.0, 0.0, 1.0]


@torch.library.custom_op("kit_selfcheck::paged_write", mutates_args=("pool", "stage"))
def _paged_write(
    rows: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor, stage: torch.Tensor | None
) -> torch.Tensor:
    pool.index_copy_(0, slots, rows)
    if stage is not None:
        stage.copy_(rows[: stage.shape[0]])
    return rows.sum(0)


@needs_sim
def test_custom_op_with_mutable_args_runs_its_kernel_on_npu_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert simulated_npu.REJECTS_NONE_FOR_MUTABLE_ARGS is (torch.__version__ < "2.13")
    monkeypatch.setattr(simulated_npu, "REJECTS_NONE_FOR_MUTABLE_ARGS", True)  # torch < 2.13
    pool = torch.zeros(4, 2, device="npu")
    stage = torch.zeros(0, 2, device="npu")  # the zero-size buffer the NPU path needs
    total = torch.ops.kit_selfcheck.paged_write(
        torch.ones(2, 2, device="npu"), pool, torch.tensor([0, 3], device="npu"), stage
    )
    assert total.device.type == "npu"
    assert pool.cpu()[:, 1].tolist() == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(RuntimeError, match="mutable argument 'stage' is None"):
        torch.ops.kit_selfcheck.paged_write(
            torch.ones(2, 2, device="npu"), pool, torch.tensor([0, 3], device="npu"), None
        )


@needs_sim
def test_torch_itself_accepts_none_for_the_series_op_mutable_stage_args(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Patch 0004's premise, as far as a machine without a card can check it: the refusal of None for
    # a mutable `Tensor(a!)?` is the stand-in's model of what was seen on Ascend
    # (_reject_none_for_mutable_tensor), not torch's. With it switched off, torch's own dispatch of
    # vllm_omni::ar_diffusion_paged_write_attn (Autograd, ADInplaceOrView, then the PrivateUse1
    # kernel) takes None for stage_key / stage_value and runs.
    from vllm_omni.experimental.ar_diffusion.kv_cache import (
        paged_attention,  # noqa: F401  (registers the op)
    )

    monkeypatch.setattr(simulated_npu, "_reject_none_for_mutable_tensor", lambda *args: None)
    block, heads, dim = 4, 2, 8
    npu = [torch.randn(block, heads, dim).to("npu") for _ in range(3)]
    pools = [torch.zeros(3 * block, heads, dim).to("npu") for _ in range(2)]
    slots = torch.arange(block, 2 * block).to("npu")
    table = torch.tensor([[1, 0]], dtype=torch.int32).to("npu")
    host = [torch.tensor([0, block], dtype=torch.int32), torch.tensor([block], dtype=torch.int32)]
    out = torch.ops.vllm_omni.ar_diffusion_paged_write_attn(
        *npu,
        None,
        None,
        *pools,
        block,
        slots,
        torch.empty(0, dtype=torch.long).to("npu"),
        table,
        *host,
        block,
        2 * block,
        dim**-0.5,
        None,
        None,
        False,
        0,
    )
    assert out.device.type == "npu" and out.shape == (block, heads, dim)
    # the kernel ran: the chunk was written
    assert torch.equal(pools[0].cpu()[block : 2 * block], npu[1].cpu())


# -- synchronisation counting ----------------------------------------------------------------------


@needs_sim
def test_device_ops_do_not_sync_reads_do() -> None:
    x = torch.randn(8, 8, device="npu")
    with sim.count_syncs() as pure:
        y = (x @ x).softmax(-1)[2:].reshape(-1).to(torch.bfloat16)
    assert pure.total == 0
    with sim.count_syncs() as reads:
        y[0].item()
        y.cpu()
        y.to("cpu")
        y.tolist()
        bool(y[0] > 0)
        y.nonzero()
        torch.npu.synchronize()
    assert reads.by_kind == {"item": 2, "d2h": 3, "data_dependent_shape": 1, "synchronize": 1}


@needs_sim
def test_non_blocking_device_to_host_copy_is_ready_only_after_synchronize() -> None:
    x = torch.arange(1.0, 7.0, device="npu")
    ids = torch.arange(6, device="npu")
    with sim.count_syncs() as copies:
        host = x.to("cpu", non_blocking=True)
        host_ids = torch.empty(6, dtype=torch.int64).pin_memory()
        host_ids.copy_(ids, non_blocking=True)
    assert copies.total == 0  # the host did not wait
    assert host.isnan().all() and (host_ids == torch.iinfo(torch.int64).min).all()  # not there yet
    torch.npu.synchronize()
    assert host.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and host_ids.tolist() == list(range(6))
    assert x.to("cpu").tolist() == host.tolist()  # a blocking copy is ready at once


@needs_sim
def test_host_to_device_copies_record_pinned_non_blocking() -> None:
    host = torch.arange(6)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[2:].is_pinned() and not host.is_pinned()
    with sim.count_syncs() as copies:
        pinned.to("npu", non_blocking=True)
        host.to("npu", non_blocking=True)
        pinned.npu()
    assert [c.asynchronous for c in copies.h2d] == [True, False, False]
    assert copies.blocking_h2d == 2 and copies.total == 0


# -- npu_fusion_attention --------------------------------------------------------------------------


def _naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_lens: list[int],
    kv_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Per sequence, per head, plain softmax in float64."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    q0 = k0 = 0
    for ql, kl in zip(q_lens, kv_lens, strict=True):
        for h in range(q.shape[1]):
            qs = q[q0 : q0 + ql, h].double()
            ks = k[k0 : k0 + kl, h // group].double()
            vs = v[k0 : k0 + kl, h // group].double()
            out[q0 : q0 + ql, h] = torch.softmax(qs @ ks.T * scale, dim=-1) @ vs
        q0, k0 = q0 + ql, k0 + kl
    return out


def _tnd(
    q_lens: list[int], kv_lens: list[int], heads: int, kv_heads: int, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(sum(q_lens), heads, 16, generator=gen).to(dtype)
    return (q, *(torch.randn(sum(kv_lens), kv_heads, 16, generator=gen).to(dtype) for _ in "kv"))


@needs_sim
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dtype", "atol"),
    [(4, 4, torch.float32, 1e-5), (4, 2, torch.bfloat16, 2e-2), (6, 1, torch.float16, 2e-3)],
)
def test_fusion_attention_matches_naive_softmax(
    heads: int, kv_heads: int, dtype: torch.dtype, atol: float
) -> None:
    import torch_npu

    q_lens, kv_lens = [3, 5, 1], [4, 9, 2]
    q, k, v = _tnd(q_lens, kv_lens, heads, kv_heads, dtype)
    with sim.count_syncs() as syncs:
        result = torch_npu.npu_fusion_attention(
            q.npu(),
            k.npu(),
            v.npu(),
            heads,
            "TND",
            scale=0.25,
            actual_seq_qlen=list(accumulate(q_lens)),
            actual_seq_kvlen=list(accumulate(kv_lens)),
        )
    assert len(result) == 7 and result[4:] == (0, 0, 0)
    assert (
        result[0].device.type == "npu"
        and result[0].dtype == dtype
        and result[1].shape == (9, heads, 8)
    )
    assert syncs.total == 0
    expected = _naive_attention(q, k, v, q_lens, kv_lens, 0.25)
    assert torch.allclose(result[0].cpu().double(), expected, atol=atol, rtol=0)


def _npu_tnd() -> tuple[torch.Tensor, ...]:
    """fp32 q, k, v on the NPU: two heads, two sequences of 3 and 5 queries over 4 and 9 keys."""
    return tuple(t.npu() for t in _tnd([3, 5], [4, 9], 2, 2, torch.float32))


def _call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: object) -> object:
    import torch_npu

    args = {
        "head_num": q.shape[1] if q.dim() == 3 else 2,
        "input_layout": "TND",
        "actual_seq_qlen": [3, 8],
        "actual_seq_kvlen": [4, 13],
        **kwargs,
    }
    return torch_npu.npu_fusion_attention(q, k, v, **args)


@needs_sim
def test_fusion_attention_rejects_per_sequence_lengths() -> None:
    q, k, v = _npu_tnd()
    with pytest.raises(
        ValueError,
        match=r"kit rule, stricter than the real op\): actual_seq_qlen must be cumulative",
    ):
        _call(q, k, v, actual_seq_qlen=[3, 5], actual_seq_kvlen=[4, 13])
    with pytest.raises(
        RuntimeError, match=r"actual_seq_qlen must be cumulative \(non-decreasing\)"
    ):
        _call(q, k, v, actual_seq_qlen=[5, 3, 8], actual_seq_kvlen=[4, 9, 13])
    with pytest.raises(RuntimeError, match="actual_seq_kvlen must be cumulative"):
        _call(q, k, v, actual_seq_kvlen=[9, 4])
    with pytest.raises(RuntimeError, match="requires actual_seq_kvlen"):
        _call(q, k, v, actual_seq_kvlen=None)
    with pytest.raises(TypeError, match="host list of ints"):
        _call(q, k, v, actual_seq_qlen=torch.tensor([3, 8]))


# (name, how the call is broken, the real op's message) for each rule of the real operator.
RULE_CASES: list[tuple[str, dict[str, object], str]] = [
    ("cpu_tensors", {"on_host": True}, r"query, key, value must be NPU tensors"),
    (
        "key_upcast",
        {"key_dtype": torch.float32},
        r"The data type of query\[DT_BF16\], key\[DT_FLOAT\], "
        r"value\[DT_BF16\] are not equal\.",
    ),
    ("value_upcast", {"value_dtype": torch.float32}, r"value\[DT_FLOAT\] are not equal"),
    ("float64", {"dtype": torch.float64}, r"The data type of query, key, value is not supported"),
    ("head_num_not_query_n", {"head_num": 3}, r"head_num is \[3\], but got query dim1 \[2\]\."),
    ("head_num_zero", {"head_num": 0}, r"head_num must > 0, but got 0"),
    (
        "gqa_not_a_multiple",
        {"heads": 6, "kv_heads": 4},
        r"n1Size \[6\] should be a multiple of n2Size \[4\]\.",
    ),
    ("too_many_heads", {"heads": 258, "kv_heads": 2}, r"query N must be in 1~256, but got 258"),
    ("head_dim_too_large", {"head_dim": 776}, r"Head dim must <= 768, but got 776"),
    ("four_dims", {"four_dims": True}, r"not support input_layout TND with dim_num 4"),
    (
        "lists_differ_in_length",
        {"actual_seq_kvlen": [13]},
        r"the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot be empty\.",
    ),
    (
        "empty_lists",
        {"actual_seq_qlen": [], "actual_seq_kvlen": []},
        r"must be the same and cannot be empty",
    ),
    (
        "too_many_sequences",
        {"sequences": 2049},
        r"actual_seq_qlen must have 1~2K entries, but got 2049",
    ),
    (
        "sum_exceeds_t",
        {"actual_seq_qlen": [3, 9]},
        r"Query T\(8\) and key T\(13\) need larger than respectively sum of seqLen\(9\) and "
        r"sekvLen\(13\)\.",
    ),
]


def _broken_call(how: dict[str, object]) -> None:
    heads, kv_heads = int(how.get("heads", 2)), int(how.get("kv_heads", 2))
    dtype = how.get("dtype", torch.bfloat16)
    gen = torch.Generator().manual_seed(1)
    head_dim = int(how.get("head_dim", 16))
    q = torch.randn(8, heads, head_dim, generator=gen).to(dtype)
    k = torch.randn(13, kv_heads, head_dim, generator=gen).to(how.get("key_dtype", dtype))
    v = torch.randn(13, kv_heads, head_dim, generator=gen).to(how.get("value_dtype", dtype))
    if how.get("four_dims"):
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if not how.get("on_host"):
        q, k, v = q.npu(), k.npu(), v.npu()
    lists = {
        name: how[name]
        for name in ("actual_seq_qlen", "actual_seq_kvlen", "head_num")
        if name in how
    }
    if "sequences" in how:  # one token per sequence, one key per sequence
        count = int(how["sequences"])
        q, k, v = (t[:1].expand(count, -1, -1).contiguous() for t in (q, k, v))
        lists = {
            "actual_seq_qlen": list(range(1, count + 1)),
            "actual_seq_kvlen": list(range(1, count + 1)),
        }
    _call(q, k, v, **lists)


@needs_sim
@pytest.mark.parametrize(("name", "how", "message"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_a_call_that_breaks_a_rule_of_the_real_op_raises_its_message(
    name: str, how: dict[str, object], message: str
) -> None:
    with pytest.raises(RuntimeError, match=message) as raised:
        _broken_call(how)
    # names the document or source that states the rule
    assert "[rule of the real op: " in str(raised.value)


@needs_sim
def test_the_same_calls_pass_when_unbroken() -> None:
    # Control for the cases above: the call they start from is valid, so each failure is the break's
    # doing.
    _broken_call({})
    _broken_call({"heads": 4, "kv_heads": 2})
    _broken_call({"dtype": torch.float16})


@needs_sim
def test_graph_mode_is_refused() -> None:
    q, k, v = _npu_tnd()
    with torch.npu.graph(None), pytest.raises(RuntimeError, match="graph mode .* is not supported"):
        _call(q, k, v)
    _call(q, k, v)  # eager again after the capture


@needs_sim
def test_probabilities_are_cast_to_the_input_dtype_before_p_v() -> None:
    import torch_npu

    # One query row, two keys (scores 0.3 and 0), values +1 and -1: the output is p0 - p1, which
    # differs in bf16 depending on whether p0 and p1 were rounded to bf16 before P.V (the kernel
    # rounds them).
    q = torch.zeros(1, 1, 16, dtype=torch.bfloat16)
    q[0, 0, 0] = 0.3
    k = torch.zeros(2, 1, 16, dtype=torch.bfloat16)
    k[0, 0, 0] = 1.0
    v = torch.zeros(2, 1, 16, dtype=torch.bfloat16)
    v[0], v[1] = 1.0, -1.0
    out = torch_npu.npu_fusion_attention(
        q.npu(), k.npu(), v.npu(), 1, "TND", actual_seq_qlen=[1], actual_seq_kvlen=[2]
    )[0].cpu()
    probs = torch.softmax(torch.stack([q[0, 0, 0].float(), torch.tensor(0.0)]), 0)
    cast_first = (probs.to(torch.bfloat16).float() @ torch.tensor([1.0, -1.0])).to(torch.bfloat16)
    fp32_probs = (probs @ torch.tensor([1.0, -1.0])).to(torch.bfloat16)
    assert cast_first != fp32_probs  # the case tells the two apart
    assert out[0, 0, 0] == cast_first


@needs_sim
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pse", torch.zeros(1)),
        ("padding_mask", torch.zeros(1)),
        ("atten_mask", torch.zeros(8, 13, dtype=torch.bool)),
        ("keep_prob", 0.9),
        ("pre_tockens", 0),
        ("next_tockens", 0),
        ("inner_precise", 2),
        ("prefix", [1]),
        ("sparse_mode", 3),
        ("softmax_layout", "TND"),
        ("sink", torch.zeros(2)),
        ("dropout_mask", torch.zeros(1)),
    ],
)
def test_fusion_attention_refuses_what_it_does_not_model(name: str, value: object) -> None:
    q, k, v = _npu_tnd()
    with pytest.raises(NotImplementedError, match=f"{name}="):
        _call(q, k, v, **{name: value})


@needs_sim
def test_fusion_attention_refuses_other_layouts() -> None:
    import torch_npu

    q = torch.randn(1, 2, 3, 16)
    with pytest.raises(NotImplementedError, match="input_layout='BNSD'"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD")


def test_fusion_attention_signature_matches_the_pinned_wheel() -> None:
    # Needs no installed simulator: both legs run it (tests/kit/test_npu_schema.py shows the
    # comparison bites).
    version = npu_schema.pinned_version()
    assert npu_schema.check_against_wheel(simulated_npu.npu_fusion_attention, version) == []
