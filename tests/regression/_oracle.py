"""Deterministic regression cases (seeded CPU inputs), computed by whichever vllm_omni is importable.

In the test process (``compute_all()``) that is the patched tree, first on ``sys.path``; as the
script ``python _oracle.py OUT.pt`` in a fresh interpreter whose ``PYTHONPATH`` names the pristine
tree, the pristine one (both trees cannot share a process: same module names, same custom-op name).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import oracle_cache
import torch

CPU = torch.device("cpu")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# (name, batch, tokens S, heads H, head_dim D). cos/sin are (S, D/2).
# LingBot-World per-rank tokens under Ulysses SP-4: cos (1170, 64)
ROPE_CASES = [
    ("s_ne_h", 1, 12, 4, 16),  # S != H: the pre-fix broadcast raises
    ("s_eq_h", 2, 6, 6, 8),  # S == H: the pre-fix broadcast is silently wrong
    ("sp4_local", 1, 1170, 40, 128),
]

# Paged attention geometries: (name, num_blocks, block_size, kv_heads, head_dim, dtype,
# sequences [(q_len, kv_len, block ids)], block-table width, 4-D batched query).
# Block 0 is the zeroed null block used as table padding, as in build_block_table.
PAGED_CASES = [
    ("b1_aligned_fp32", 8, 16, 2, 32, "fp32", [(32, 48, [3, 5, 1])], 5, False),
    ("b1_partial_bf16", 8, 16, 2, 32, "bf16", [(16, 40, [2, 7, 4])], 6, True),
    ("b1_one_block_fp16", 6, 8, 4, 16, "fp16", [(8, 8, [5])], 3, False),
    ("b2_fp32", 10, 8, 2, 16, "fp32", [(8, 24, [1, 2, 3]), (16, 12, [6, 9])], 4, False),
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rope_inputs(index: int, dtype_name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _, batch, tokens, heads, head_dim = ROPE_CASES[index]
    g = _gen(1000 + index)
    dtype = DTYPES[dtype_name]
    x = torch.randn(batch, tokens, heads, head_dim, generator=g).to(dtype)
    angles = torch.rand(tokens, head_dim // 2, generator=g) * 6.0
    return x, angles.cos().to(dtype), angles.sin().to(dtype)


def make_rope():
    from vllm_omni.diffusion.layers.rope import RotaryEmbeddingWan

    # LingBotSelfAttention's configuration.
    return RotaryEmbeddingWan(is_neox_style=False, half_head_dim=True)


def rope_results() -> dict[str, torch.Tensor]:
    rope = make_rope()
    out: dict[str, torch.Tensor] = {}
    for index, (name, _b, tokens, _h, _d) in enumerate(ROPE_CASES):
        for dtype_name in DTYPES:
            x, cos, sin = rope_inputs(index, dtype_name)
            cos4, sin4 = cos.view(1, tokens, 1, -1), sin.view(1, tokens, 1, -1)
            out[f"rope/{name}/{dtype_name}/native_4d"] = rope.forward_native(x, cos4, sin4)
            out[f"rope/{name}/{dtype_name}/forward_4d"] = rope(x, cos4, sin4)
    return out


def paged_inputs(index: int) -> dict:
    _, num_blocks, block_size, heads, head_dim, dtype_name, seqs, width, batched = PAGED_CASES[
        index
    ]
    dtype = DTYPES[dtype_name]
    g = _gen(2000 + index)
    key_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=g).to(dtype)
    value_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=g).to(dtype)
    key_cache[0] = 0
    value_cache[0] = 0
    total_q = sum(q for q, _, _ in seqs)
    query = torch.randn(total_q, heads, head_dim, generator=g).to(dtype)
    if batched:
        assert len(seqs) == 1
        query = query.unsqueeze(0)
    table = torch.zeros(len(seqs), width, dtype=torch.int32)
    for row, (_, _, ids) in enumerate(seqs):
        table[row, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
    q_ends = torch.tensor([0] + [q for q, _, _ in seqs], dtype=torch.int32).cumsum(
        0, dtype=torch.int32
    )
    return {
        "query": query,
        "key_cache": key_cache,
        "value_cache": value_cache,
        "block_table": table,
        "query_start_loc": q_ends,
        "seq_lens": torch.tensor([kv for _, kv, _ in seqs], dtype=torch.int32),
        "max_query_len": max(q for q, _, _ in seqs),
        "max_seq_len": width * block_size,
        "softmax_scale": head_dim**-0.5,
    }


def paged_attention_call(inputs: dict, **extra) -> torch.Tensor:
    from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import (
        ar_diffusion_paged_attention,
    )

    named = {k: v for k, v in inputs.items() if k not in ("query", "key_cache", "value_cache")}
    return ar_diffusion_paged_attention(
        inputs["query"], inputs["key_cache"], inputs["value_cache"], **named, **extra
    )


def fused_op_call(index: int) -> dict[str, torch.Tensor]:
    """Realtime-style call of the fused write+attend custom op: write the current chunk, then attend."""
    import vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention  # noqa: F401  (registers the op)

    inputs = paged_inputs(index)
    q_len, kv_len, ids = PAGED_CASES[index][6][0]
    block_size = inputs["key_cache"].shape[1]
    key_pool = inputs["key_cache"].flatten(0, 1).clone()
    value_pool = inputs["value_cache"].flatten(0, 1).clone()
    # The current chunk is the last q_len tokens of the visible window.
    positions = torch.arange(kv_len - q_len, kv_len)
    slots = (
        torch.tensor(ids, dtype=torch.long)[positions // block_size] * block_size
        + positions % block_size
    )
    g = _gen(3000 + index)
    k_curr = torch.randn(q_len, *key_pool.shape[1:], generator=g).to(key_pool.dtype)
    v_curr = torch.randn(q_len, *value_pool.shape[1:], generator=g).to(value_pool.dtype)
    query = inputs["query"].reshape(-1, *inputs["query"].shape[-2:])
    # The op's arguments: the chunk (no action tokens), the pools and write slots, the paged
    # metadata, no staging.
    chunk = (query, k_curr, v_curr, None, None)
    pools = (key_pool, value_pool, block_size, slots, torch.empty(0, dtype=torch.long))
    metadata = (
        "block_table",
        "query_start_loc",
        "seq_lens",
        "max_query_len",
        "max_seq_len",
        "softmax_scale",
    )
    staging = (None, None, False, 0)
    out = torch.ops.vllm_omni.ar_diffusion_paged_write_attn(
        *chunk, *pools, *(inputs[k] for k in metadata), *staging
    )
    return {"out": out, "key_pool": key_pool, "value_pool": value_pool}


def paged_results() -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for index, case in enumerate(PAGED_CASES):
        name = case[0]
        out[f"paged/{name}/attention"] = paged_attention_call(paged_inputs(index))
        if len(case[6]) == 1:
            for key, value in fused_op_call(index).items():
                out[f"paged/{name}/fused_op/{key}"] = value
    return out


def op_schema() -> str:
    import vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention  # noqa: F401  (registers the op)

    return str(torch.ops.vllm_omni.ar_diffusion_paged_write_attn.default._schema)


class FakeKVManager:
    """The slice of the AR-Diffusion KV manager that ARDiffusionPagedForwardContext reads."""

    def __init__(
        self, *, block_size: int = 4, num_blocks: int = 32, heads: int = 2, head_dim: int = 8
    ):
        self.block_size = block_size
        self.spec = SimpleNamespace(sink_chunks=1)
        self.history_staging: list = []  # staging disabled (the default)
        self.history_staging_state = None
        self._k_pools = [torch.zeros(num_blocks * block_size, heads, head_dim)]
        self._v_pools = [torch.zeros(num_blocks * block_size, heads, head_dim)]

    def scratch_block_ids(self, kv_branch: str, start: int, count: int) -> list[int]:
        return list(range(20 + start, 20 + start + count))


def forward_context(
    *, history_block_ids: list[int], seq_len: int, max_video_tokens: int, kv_cache=None
):
    from vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention import (
        ARDiffusionPagedForwardContext,
    )

    return ARDiffusionPagedForwardContext(
        kv_cache=kv_cache or FakeKVManager(),
        adapter=SimpleNamespace(num_computed_tokens=0),
        kv_branch="cond",
        history_block_ids=history_block_ids,
        seq_len=seq_len,
        commit_current=False,
        max_video_tokens=max_video_tokens,
    )


CONTEXT_CASES = [
    # (name, history blocks, current tokens, max video tokens, action tokens)
    ("growing_window", [1, 2], 8, 24, 0),
    ("full_window_sliding", [1, 2, 3, 4, 5], 8, 16, 0),
    ("with_actions", [1], 4, 16, 3),
]


def context_results() -> dict:
    out: dict = {}
    for name, history, seq_len, max_video_tokens, action_len in CONTEXT_CASES:
        ctx = forward_context(
            history_block_ids=history, seq_len=seq_len, max_video_tokens=max_video_tokens
        )
        ctx.prepare(CPU, action_len, seq_len + action_len)
        inputs = ctx.layer_inputs(0)
        for field in ("block_table", "query_start_loc", "seq_lens", "video_slots", "action_slots"):
            out[f"context/{name}/{field}"] = getattr(inputs, field)
        ints = (
            inputs.block_size,
            inputs.seq_len,
            inputs.max_query_len,
            inputs.max_seq_len,
            inputs.stage_first_block,
        )
        out[f"context/{name}/ints"] = torch.tensor(ints)
        out[f"context/{name}/stage_is_none"] = torch.tensor(
            [inputs.stage_key is None, inputs.stage_value is None]
        )
    return out


# LingBot-World self-attention on CPU: (name, dim, heads, chunk tokens, max cache tokens).
LINGBOT_CASE = ("two_chunks", 64, 4, 12, 36)


def ensure_single_rank_parallel_state() -> None:
    """Real vllm / vllm-omni parallel state for one CPU rank (gloo), initialised once per process."""
    import socket

    from vllm_omni.diffusion.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized():
        return
    if not torch.distributed.is_initialized():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        # vllm-omni's own init divides the rank by the accelerator count, which is 0 on a CPU-only
        # host: create the single-rank WORLD group first, then let it build the rest on top.
        torch.distributed.init_process_group(
            backend="gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0
        )
    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    parallel_state.initialize_model_parallel(
        data_parallel_size=1, sequence_parallel_size=1, tensor_parallel_size=1, backend="gloo"
    )


def build_lingbot_self_attention():
    """A real ``LingBotSelfAttention`` on CPU with seeded weights.

    vllm-omni has no CPU platform: its attention-backend lookup and the impl's forward dispatch
    raise there. Answer the lookup (during construction only) with vllm-omni's TORCH_SDPA backend
    and route that impl's forward to its portable torch path. Everything else, including
    ``forward``'s choice between the paged entry and the dense layer, is real.
    """
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum
    from vllm_omni.diffusion.models.lingbot_world import transformer
    from vllm_omni.platforms import current_omni_platform

    ensure_single_rank_parallel_state()
    _, dim, heads, _, _ = LINGBOT_CASE
    platform_cls = type(current_omni_platform)
    original = platform_cls.__dict__.get("get_diffusion_attn_backend_cls")

    def sdpa_backend(cls, selected_backend, head_size, allow_trtllm_default=False):
        return DiffusionAttentionBackendEnum.TORCH_SDPA.value

    platform_cls.get_diffusion_attn_backend_cls = classmethod(sdpa_backend)
    try:
        with set_current_vllm_config(VllmConfig()):
            module = transformer.LingBotSelfAttention(dim=dim, num_heads=heads)
    finally:
        if original is None:
            del platform_cls.get_diffusion_attn_backend_cls
        else:
            platform_cls.get_diffusion_attn_backend_cls = original
    g = _gen(4000)
    with torch.no_grad():
        for _, param in sorted(module.named_parameters()):
            param.copy_(
                torch.randn(param.shape, generator=g) * 0.2 + (1.0 if param.dim() == 1 else 0.0)
            )
    # The impl dispatches on the platform too: on CPU, run the SDPA backend's portable torch path.
    module.attn.attention.forward = module.attn.attention.forward_xpu
    # What the model loader does after loading weights (on CPU it selects vllm's CPU GEMM).
    for sub in module.modules():
        quant_method = getattr(sub, "quant_method", None)
        if quant_method is not None:
            quant_method.process_weights_after_loading(sub)
    return module.eval()


def lingbot_inputs(
    chunk: int, rope_2d: bool
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    _, dim, heads, tokens, _ = LINGBOT_CASE
    g = _gen(5000 + chunk)
    hidden = torch.randn(1, tokens, dim, generator=g)
    angles = torch.rand(tokens, dim // heads // 2, generator=g) * 6.0
    cos, sin = angles.cos(), angles.sin()
    if not rope_2d:
        cos, sin = cos.view(1, tokens, 1, -1), sin.view(1, tokens, 1, -1)
    return hidden, (cos, sin)


def lingbot_direct_replay(
    module, *, rope_2d: bool, device: torch.device = CPU, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Two offline chunks through ``LingBotSelfAttention.forward`` (tick None: direct replay); results
    on CPU."""
    from vllm_omni.diffusion.models.lingbot_world import transformer

    _, dim, heads, tokens, max_tokens = LINGBOT_CASE
    cache = transformer.allocate_lingbot_cache(
        batch_size=1,
        num_layers=1,
        max_tokens=max_tokens,
        num_local_heads=heads,
        head_dim=dim // heads,
        device=device,
        dtype=dtype,
    ).self_attention[0]
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for chunk in range(2):
            hidden, (cos, sin) = lingbot_inputs(chunk, rope_2d)
            rotary = (cos.to(device), sin.to(device))
            start = chunk * tokens
            result = module(
                hidden.to(device, dtype),
                cache=cache,
                current_start=start,
                rotary_emb=rotary,
                sink_tokens=0,
            )
            assert result.device == device
            out[f"chunk{chunk}"] = result.cpu()
    out["cache_key"] = cache.key.to("cpu", copy=True)
    return out


def lingbot_results() -> dict[str, torch.Tensor]:
    module = build_lingbot_self_attention()
    return {f"lingbot/{k}": v for k, v in lingbot_direct_replay(module, rope_2d=False).items()}


SECTIONS = {
    "rope": rope_results,
    "paged": paged_results,
    "context": context_results,
    "lingbot": lingbot_results,
}


def compute_all(sections=tuple(SECTIONS)) -> dict:
    import vllm_omni

    results: dict = {"meta/vllm_omni_file": vllm_omni.__file__, "meta/op_schema": op_schema()}
    for section in sections:
        results.update(SECTIONS[section]())
    return results


def loaded_outside_env() -> list[str]:
    """Files loaded from outside the env (covered by its stamp): the oracle's code, the stand-in, the
    pristine tree."""
    files = {Path(__file__).resolve()}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if name and Path(name).is_file():
            files.add(Path(name).resolve())
    return oracle_cache.outside_env(
        files, {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}, sys.path
    )


if __name__ == "__main__":
    # python _oracle.py OUT.pt [INPUTS.json]: the results, and the files they were computed from. A
    # fresh interpreter that exits when done: without the collector, which walks the ~700k objects
    # vllm's imports leave again and again while they load (a sixth of this process's CPU;
    # docs/results.md).
    gc.disable()
    torch.save(compute_all(), sys.argv[1])
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(
            json.dumps(loaded_outside_env(), indent=1) + "\n", encoding="utf-8"
        )
