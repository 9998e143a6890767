"""A simulated Ascend NPU: the npu test leg's stand-in where no Ascend card and no CANN exist.

``install()`` renames torch's PrivateUse1 backend to ``"npu"`` (as torch_npu does):
``Tensor.is_npu``, ``Tensor.npu()``, ``torch.npu`` and device ``npu:0`` exist. Tensors on ``npu:0``
wrap a CPU tensor; every aten op runs on that storage (in-place writes, also from custom ops, reach
it). ``sys.modules["torch_npu"]`` gets ``npu_fusion_attention``, a CPU reference with the pinned
wheel's schema (checked by torch_npu_schema.py). Not torch_npu, CANN or a performance model: results
are CPU results, reported as "simulated NPU". The rename cannot be undone in a process: install only
in a dedicated one (the npu leg's, or a subprocess).

Counted (``SimulatedNPU.syncs``, ``count_syncs()``): D2H reads (``.item()``, ``bool()``,
``.tolist()``, ``.cpu()``, copies into CPU tensors, printing), ``torch.npu.synchronize()``, ops
whose output shape depends on device data (``nonzero``, boolean indexing, ...), and every H2D copy
with whether it was non-blocking from pinned memory. Stock torch pins only through an accelerator's
C++ hooks, so ``Tensor.pin_memory`` returns a CPU copy whose storage is remembered as pinned
(``torch.empty(..., pin_memory=True)`` is not simulated).
"""

from __future__ import annotations

import importlib.machinery
import inspect
import sys
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

BACKEND = "npu"
CPU = torch.device("cpu")

aten = torch.ops.aten

# Ops whose output shape depends on device data: a real device must copy to the host first.
_DATA_DEPENDENT = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
    aten.unique_dim.default,
    aten.repeat_interleave.Tensor,
    aten.equal.default,
}
# Ops that legitimately mix an npu tensor with a non-scalar CPU tensor (as on CUDA).
_MIXED_DEVICE_OK = {
    aten.copy_.default,
    aten._to_copy.default,
    aten.index.Tensor,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}
# Factory overloads that land on the PrivateUse1 key with no tensor argument to wrap: filled,
# ranged, random.
_FILLED = (
    "empty.memory_format",
    "empty_strided",
    "full",
    "zeros",
    "ones",
    "scalar_tensor",
    "eye",
    "eye.m",
)
_RANGED = ("arange", "arange.start", "arange.start_step", "linspace")
_RANDOM = (
    "randn",
    "randn.generator",
    "rand",
    "rand.generator",
    "randint",
    "randint.low",
    "randperm",
)


@dataclass(frozen=True)
class HostToDeviceCopy:
    """One CPU -> npu copy: async only when non_blocking and from pinned memory (as on CUDA)."""

    nbytes: int
    non_blocking: bool
    pinned: bool

    @property
    def asynchronous(self) -> bool:
        return self.non_blocking and self.pinned


@dataclass
class SyncCounter:
    """Host<->device synchronisations by kind, plus every H2D copy seen."""

    by_kind: Counter[str] = field(default_factory=Counter)
    h2d: list[HostToDeviceCopy] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Synchronisations where the host waits for device data."""
        return sum(self.by_kind.values())

    @property
    def blocking_h2d(self) -> int:
        """H2D copies the host had to wait for (pageable source or non_blocking=False)."""
        return sum(1 for c in self.h2d if not c.asynchronous)


class SimulatedNPUTensor(torch.Tensor):
    """A tensor that reports device npu:0 and keeps its data in a CPU tensor (``.cpu_data``)."""

    cpu_data: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, cpu_data: torch.Tensor) -> SimulatedNPUTensor:
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            cpu_data.size(),
            strides=cpu_data.stride(),
            storage_offset=cpu_data.storage_offset(),
            dtype=cpu_data.dtype,
            layout=cpu_data.layout,
            device=_state().device,
            requires_grad=cpu_data.requires_grad,
        )
        wrapper.cpu_data = cpu_data
        return wrapper

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        _state().record("print")
        text = repr(self.cpu_data)
        return f"{text[:-1]}, device='{self.device}')"

    def tolist(self) -> Any:
        _state().record("d2h")
        return self.cpu_data.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() first."
        )

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return _state().dispatch(func, args, kwargs or {})


def _is_npu(value: Any) -> bool:
    return isinstance(value, SimulatedNPUTensor)


def _to_cpu_arg(value: Any) -> Any:
    if _is_npu(value):
        return value.cpu_data
    if isinstance(value, torch.device) and value.type == BACKEND:
        return CPU
    return value


class SimulatedNPU:
    """The installed simulation: device, counters, the torch_npu stand-in module."""

    def __init__(self, torch_npu_version: str) -> None:
        self.device = torch.device(BACKEND, 0)  # valid only once PrivateUse1 is renamed
        self.torch_npu_version = torch_npu_version
        self.syncs = SyncCounter()
        self._scopes: list[SyncCounter] = []
        self._pinned: weakref.WeakSet[torch.UntypedStorage] = weakref.WeakSet()
        self.capturing = False  # inside torch.npu.graph(...)
        # non-blocking D2H copies in flight
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.torch_npu = _torch_npu_module(self)

    def record(self, kind: str) -> None:
        for counter in (self.syncs, *self._scopes):
            counter.by_kind[kind] += 1

    def _record_h2d(self, copy: HostToDeviceCopy) -> None:
        for counter in (self.syncs, *self._scopes):
            counter.h2d.append(copy)

    @contextmanager
    def count_syncs(self) -> Iterator[SyncCounter]:
        """Count only what happens inside the block (nests; ``syncs`` keeps counting too)."""
        scope = SyncCounter()
        self._scopes.append(scope)
        try:
            yield scope
        finally:
            self._scopes.remove(scope)

    def synchronize(self, device: Any = None) -> None:
        self.record("synchronize")
        for host, data in self._pending:  # pending non-blocking device->host copies land now
            host.copy_(data)
        self._pending.clear()

    @contextmanager
    def graph(self, npu_graph: Any = None, **kwargs: Any) -> Iterator[None]:
        """``torch.npu.graph(...)``: marks a capture (nothing is recorded), so ops can refuse graph
        mode."""
        self.capturing = True
        try:
            yield
        finally:
            self.capturing = False

    def pin_memory(self, tensor: torch.Tensor, device: Any = None) -> torch.Tensor:
        if _is_npu(tensor) or tensor.device.type != "cpu":
            raise RuntimeError(
                f"cannot pin '{tensor.device}' memory: only dense CPU tensors can be pinned"
            )
        if self.is_pinned(tensor):
            return tensor
        pinned = tensor.clone()
        self._pinned.add(pinned.untyped_storage())
        return pinned

    def is_pinned(self, tensor: torch.Tensor, device: Any = None) -> bool:
        if _is_npu(tensor) or tensor.device.type != "cpu":
            return False
        return tensor.untyped_storage() in self._pinned

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if func.namespace != "aten":
            return self._custom_op(func, args, kwargs)
        if func is aten.copy_.default:
            return self._copy(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            self.record("item")
        elif func in _DATA_DEPENDENT or _is_boolean_index(func, args):
            self.record("data_dependent_shape")
        if func not in _MIXED_DEVICE_OK:
            _check_same_device(func, args, kwargs)
        target = None if kwargs.get("device") is None else torch.device(kwargs["device"])
        if target is not None and target.type == "cpu" and any(_is_npu(a) for a in args):
            if kwargs.get("non_blocking"):
                return self._arrives_at_synchronize(
                    self._run_on_cpu(func, args, kwargs, wrap=False)
                )
            self.record("d2h")
        return self._run_on_cpu(func, args, kwargs, wrap=target is None or target.type == BACKEND)

    def _run_on_cpu(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, wrap: bool
    ) -> Any:
        originals = {id(a.cpu_data): a for a in (*args, *kwargs.values()) if _is_npu(a)}
        out = func(*tree_map(_to_cpu_arg, args), **tree_map(_to_cpu_arg, kwargs))
        if not wrap:
            return out

        def rewrap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            # In-place and out= ops return their argument: hand back the same npu object.
            original = originals.get(id(value))
            return original if original is not None else SimulatedNPUTensor(value)

        return tree_map(rewrap, out)

    def _copy(
        self, dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False
    ) -> torch.Tensor:
        if _is_npu(dst) and not _is_npu(src):
            self._record_h2d(HostToDeviceCopy(src.nbytes, non_blocking, self.is_pinned(src)))
        if not _is_npu(dst) and non_blocking:
            dst.copy_(_to_cpu_arg(src))
            return self._arrives_at_synchronize(dst)
        if not _is_npu(dst):
            self.record("d2h")
        target = dst.cpu_data if _is_npu(dst) else dst
        target.copy_(_to_cpu_arg(src))
        return dst

    def _arrives_at_synchronize(self, host: torch.Tensor) -> torch.Tensor:
        """A non-blocking D2H copy (no sync counted): ``host`` reads NaN or the dtype's minimum until
        synchronize()."""
        if host.dtype == torch.bool or host.numel() == 0:
            return host  # nothing to poison that a reader could tell apart
        self._pending.append((host, host.clone()))
        poison = float("nan") if host.is_floating_point() else torch.iinfo(host.dtype).min
        host.fill_(poison)
        return host

    def _custom_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Run the op's own kernel with npu tensors, as a real backend would: an op with only a
        # cpu/cuda kernel fails here too, and ops inside the kernel come back through dispatch.
        _reject_none_for_mutable_tensor(func, args, kwargs)
        if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(func.name(), "PrivateUse1"):
            raise NotImplementedError(
                f"{func.name()} has no kernel for the npu backend (simulated NPU)"
            )
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
        return func.redispatch(keys, *args, **kwargs)

    def factory(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = CPU
        if kwargs.get("pin_memory"):
            raise NotImplementedError("pin_memory=True in a factory call is not simulated")
        return SimulatedNPUTensor(func(*args, **kwargs))


def _is_boolean_index(func: Any, args: tuple[Any, ...]) -> bool:
    if func is not aten.index.Tensor:
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def _check_same_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Like CUDA: an npu op may take 0-dim CPU scalars, not other CPU tensors."""
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    tensors += [
        t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)
    ]
    if any(_is_npu(t) for t in tensors) and any(not _is_npu(t) and t.dim() > 0 for t in tensors):
        raise RuntimeError(
            f"{func}: Expected all tensors to be on the same device, but found at least two "
            "devices, npu:0 and cpu!"
        )


# None for a mutable ``Tensor?`` failed in NPU eager dispatch with torch / torch_npu 2.10, as seen on
# Ascend (docs/upstream-facts.md); torch itself accepts it on 2.10 and 2.13 alike
# (test_torch_itself_accepts_none_for_the_series_op_mutable_stage_args). The series passes zero-size
# buffers below torch 2.13 (npu-empty-stage-buffers): the stand-in rejects None there, and where a
# test models such a torch (the npu_dispatch_rejects_none fixture).
REJECTS_NONE_FOR_MUTABLE_ARGS = torch.__version__ < "2.13"


def _reject_none_for_mutable_tensor(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    if not REJECTS_NONE_FOR_MUTABLE_ARGS:
        return
    for index, arg in enumerate(func._schema.arguments):
        mutable = arg.alias_info is not None and arg.alias_info.is_write
        value = args[index] if index < len(args) else kwargs.get(arg.name)
        if mutable and value is None:
            raise RuntimeError(
                f"{func.name()}: mutable argument '{arg.name}' is None (rejected on npu)"
            )


# -- npu_fusion_attention: CPU reference with the real torch_npu schema --------------------------


def _unmodelled(name: str, value: Any) -> NotImplementedError:
    return NotImplementedError(
        f"npu_fusion_attention (simulated): {name}={value!r} is not modelled"
    )


# Where each rule of the real operator is stated (quoted wording is the operator's own message):
DOC = (
    "https://gitee.com/ascend/op-plugin/blob/master/docs/context/torch_npu-npu_fusion_attention.md"
)
ACLNN = "CANN ops-transformer attention/flash_attention_score/op_host/op_api/aclnn_flash_attention_score.cpp"
TILING = "CANN ops-transformer flash_attention_score_tiling_general.cpp"
OP_API = "op-plugin op_plugin/ops/opapi/FlashAttentionKernelNpuOpApi.cpp"
# DOC: query/key/value float16, bfloat16, float32
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEADS = 256  # DOC: Nq 1~256
MAX_HEAD_DIM = 768  # ACLNN HEAD_DIM_MAX; DOC: D 1~768
MAX_TOKENS = 1024 * 1024  # DOC: varlen T (B*S) 1~1M
MAX_SEQUENCES = 2048  # DOC: actual_seq_qlen has 1~2K entries (varlen B 1~2K)
_DTYPE_NAMES = {torch.float16: "DT_FLOAT16", torch.bfloat16: "DT_BF16", torch.float32: "DT_FLOAT"}
# What the reference computes; gen_mask_parallel, sync, seed and offset only steer dropout, which
# keep_prob=1 switches off (accepted, no effect). Any other argument that differs from its default
# is refused.
_MODELLED = {
    "query",
    "key",
    "value",
    "head_num",
    "input_layout",
    "scale",
    "actual_seq_qlen",
    "actual_seq_kvlen",
}
_MODELLED |= {"gen_mask_parallel", "sync", "seed", "offset"}
_Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]


def _op_error(message: str, source: str) -> RuntimeError:
    """A violated rule of the real operator: its message, and where the rule is stated."""
    return RuntimeError(f"npu_fusion_attention: {message} [rule of the real op: {source}]")


def _check_devices(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """DOC: query, key and value are device-side tensors; the op never reads host memory."""
    where = {
        name: t.device.type
        for name, t in (("query", query), ("key", key), ("value", value))
        if not _is_npu(t)
    }
    if where:
        raise _op_error(f"{', '.join(where)} must be NPU tensors (device-side), got {where}", DOC)


def _check_dtypes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """ACLNN InputDtypeCheck: one dtype for q/k/v; DOC: among float16, bfloat16, float32."""
    names = [_DTYPE_NAMES.get(t.dtype, str(t.dtype)) for t in (query, key, value)]
    if len({query.dtype, key.dtype, value.dtype}) != 1:
        raise _op_error(
            "The data type of query[{}], key[{}], value[{}] are not equal.".format(*names), ACLNN
        )
    if query.dtype not in DTYPES:
        raise _op_error(f"The data type of query, key, value is not supported ({names[0]}).", DOC)


def _check_shapes(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int
) -> None:
    """TND: query (T, Nq, D), key/value (T_kv, Nkv, D); the head and head-dim rules of the real op."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() not in (3, 4):  # OP_API
            got = f"{t.dim()}-dimensional"
            raise _op_error(
                f"The shapes of the input {name} should be 3 or 4 dimensional, but got {got}",
                OP_API,
            )
        if t.dim() != 3:  # ACLNN AnalysisAxis: TND is three-dimensional
            raise _op_error(f"not support input_layout TND with dim_num {t.dim()}", ACLNN)
    if key.shape != value.shape:  # DOC: key and value have one shape
        raise _op_error(
            f"key and value must have the same shape, got {tuple(key.shape)} and "
            f"{tuple(value.shape)}",
            DOC,
        )
    heads, heads_kv = query.shape[1], key.shape[1]
    if head_num <= 0:
        raise _op_error(f"head_num must > 0, but got {head_num}", ACLNN)
    if head_num != heads:
        raise _op_error(f"head_num is [{head_num}], but got query dim1 [{heads}].", TILING)
    if heads > MAX_HEADS:
        raise _op_error(f"query N must be in 1~{MAX_HEADS}, but got {heads}", DOC)
    if heads_kv == 0:
        raise _op_error("N2 is zero.", TILING)
    if heads % heads_kv:
        raise _op_error(f"n1Size [{heads}] should be a multiple of n2Size [{heads_kv}].", TILING)
    if query.shape[2] != key.shape[2]:
        raise _op_error(
            f"qD and kD should be same, but got qD={query.shape[2]} kD={key.shape[2]}", ACLNN
        )
    if not 1 <= query.shape[2] <= MAX_HEAD_DIM:
        raise _op_error(f"Head dim must <= {MAX_HEAD_DIM}, but got {query.shape[2]}", ACLNN)
    for name, t in (("query", query), ("key", key)):
        if not 1 <= t.shape[0] <= MAX_TOKENS:
            raise _op_error(f"{name} T must be in 1~1M (varlen T = B*S), but got {t.shape[0]}", DOC)


def _check_cumulative(name: str, lengths: Sequence[int] | None) -> list[int]:
    """Cumulative lengths (e.g. 2,4,6 for three sequences of 2): a host int list, non-decreasing."""
    if lengths is None:
        raise _op_error(f"input_layout 'TND' requires {name}", DOC)
    if isinstance(lengths, torch.Tensor) or not all(isinstance(v, int) for v in lengths):
        raise TypeError(
            f"npu_fusion_attention: {name} must be a host list of ints (int[]), got {lengths!r}"
        )
    ends = list(lengths)
    trailing = next((i for i in range(1, len(ends)) if ends[i] == 0 and ends[i - 1] > 0), None)
    if trailing is not None and not any(ends[trailing:]):
        raise _unmodelled(f"{name} trailing zeros (skipped batches)", ends)
    if ends and (ends[0] < 0 or any(b < a for a, b in zip(ends, ends[1:], strict=False))):
        # DOC: "the cumulative length of each S" (a zero-length sequence repeats the previous end)
        raise _op_error(f"{name} must be cumulative (non-decreasing), got {ends}", DOC)
    return ends


def _check_lengths(ends_q: list[int], ends_kv: list[int], tokens_q: int, tokens_kv: int) -> None:
    """The varlen list rules of the real op, then the kit's stricter rule on the last entry."""
    if not ends_q or not ends_kv or len(ends_q) != len(ends_kv):
        raise _op_error(
            "the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot be "
            "empty.",
            OP_API,
        )
    if len(ends_q) > MAX_SEQUENCES:
        raise _op_error(f"actual_seq_qlen must have 1~2K entries, but got {len(ends_q)}", DOC)
    if tokens_q < ends_q[-1] or tokens_kv < ends_kv[-1]:
        raise _op_error(
            f"Query T({tokens_q}) and key T({tokens_kv}) need larger than respectively sum of "
            f"seqLen({ends_q[-1]}) and sekvLen({ends_kv[-1]}).",
            TILING,
        )
    for name, ends, total in (
        ("actual_seq_qlen", ends_q, tokens_q),
        ("actual_seq_kvlen", ends_kv, tokens_kv),
    ):
        if ends[-1] != total:
            # Not the operator's rule (it ignores rows past the sum): the kit's, because rows past
            # the sum are a missing truncation in the caller, whose output rows would be left
            # unwritten.
            raise ValueError(
                f"npu_fusion_attention (kit rule, stricter than the real op): {name} must be "
                "cumulative and end "
                f"at the token count {total}, got {ends}"
            )


def _check_eager() -> None:
    """DOC: the interface does not support graph mode (the deploy config stays eager)."""
    if _state().capturing:
        raise _op_error("graph mode (NPU graph capture) is not supported", DOC)


def _check_unmodelled(given: dict[str, Any]) -> None:
    for name, param in inspect.signature(npu_fusion_attention).parameters.items():
        value, default = given[name], param.default
        changed = value is not None if default is None else value != default
        if name not in _MODELLED and changed:
            raise _unmodelled(name, value)


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
    sink: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    seed: int = 0,
    offset: int = 0,
) -> _Outputs:
    """CPU reference of torch_npu.npu_fusion_attention, layout TND (GQA allowed), full attention, no
    dropout.

    The real op's rules (devices, dtypes, shapes, lengths) raise RuntimeError with its message and
    the rule's source. Returns (attention in query dtype, softmax_max, softmax_sum (T_q, N, 8) fp32,
    empty, 0, 0, 0).
    """
    _check_unmodelled(locals())
    if input_layout != "TND":
        raise _unmodelled("input_layout", input_layout)
    _check_eager()
    _check_devices(query, key, value)
    _check_dtypes(query, key, value)
    _check_shapes(query, key, value, head_num)
    ends_q = _check_cumulative("actual_seq_qlen", actual_seq_qlen)
    ends_kv = _check_cumulative("actual_seq_kvlen", actual_seq_kvlen)
    _check_lengths(ends_q, ends_kv, query.shape[0], key.shape[0])
    return _tnd_attention(query, key, value, ends_q, ends_kv, scale)


def _spans(ends: list[int]) -> list[tuple[int, int]]:
    return list(zip([0, *ends[:-1]], ends, strict=True))


def _tnd_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    ends_q: list[int],
    ends_kv: list[int],
    scale: float,
) -> _Outputs:
    heads, groups = query.shape[1], query.shape[1] // key.shape[1]
    out = torch.zeros(
        query.shape[0], heads, value.shape[2], dtype=torch.float32, device=query.device
    )
    row_max = torch.zeros(query.shape[0], heads, dtype=torch.float32, device=query.device)
    row_sum = torch.zeros_like(row_max)
    for (q0, q1), (k0, k1) in zip(_spans(ends_q), _spans(ends_kv), strict=True):
        if q1 == q0 or k1 == k0:
            continue
        q = query[q0:q1].float()
        k = key[k0:k1].float().repeat_interleave(groups, dim=1)
        v = value[k0:k1].float().repeat_interleave(groups, dim=1)
        scores = torch.einsum("qnd,knd->nqk", q, k) * scale
        peak = scores.amax(dim=-1, keepdim=True)
        weights = torch.exp(scores - peak)
        total = weights.sum(dim=-1, keepdim=True)
        # The kernel casts the probabilities to the input dtype before P.V (fp32 accumulation): so
        # does this.
        probs = (weights / total).to(query.dtype).float()
        out[q0:q1] = torch.einsum("nqk,knd->qnd", probs, v)
        row_max[q0:q1] = peak.squeeze(-1).transpose(0, 1)
        row_sum[q0:q1] = total.squeeze(-1).transpose(0, 1)
    stats = (
        row_max.unsqueeze(-1).expand(-1, -1, 8).contiguous(),
        row_sum.unsqueeze(-1).expand(-1, -1, 8).contiguous(),
    )
    empty = torch.empty(0, dtype=query.dtype, device=query.device)
    return out.to(query.dtype), stats[0], stats[1], empty, 0, 0, 0


# -- installation ---------------------------------------------------------------------------------

_INSTALLED: SimulatedNPU | None = None


def _state() -> SimulatedNPU:
    if _INSTALLED is None:
        raise RuntimeError("simulated NPU tensor used before npu_standin.simulated_npu.install()")
    return _INSTALLED


def _fill_backend_module(module: types.ModuleType, sim: SimulatedNPU) -> None:
    """``torch.npu``: the few device-module calls code and torch itself make."""
    module.__doc__ = "Simulated torch.npu (npu_standin.simulated_npu): one device, npu:0."
    functions: dict[str, Callable[..., Any]] = {
        "synchronize": sim.synchronize,
        "graph": sim.graph,
        "is_current_stream_capturing": lambda: sim.capturing,
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "set_device": _set_device,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "empty_cache": lambda: None,
        "_is_in_bad_fork": lambda: False,
    }
    for name, fn in functions.items():
        setattr(module, name, fn)
    module.npu = module


def _set_device(device: Any) -> None:
    index = (
        torch.device(BACKEND, device).index
        if isinstance(device, int)
        else torch.device(device).index
    )
    if index not in (None, 0):
        raise RuntimeError(f"simulated NPU has one device, npu:0; asked for {device!r}")


def _torch_npu_module(sim: SimulatedNPU) -> types.ModuleType:
    module = types.ModuleType(
        "torch_npu", "Simulated torch_npu (npu_standin.simulated_npu): CPU reference ops."
    )
    # importlib.util.find_spec("torch_npu") (transformers asks it while vllm imports) raises on a
    # module in sys.modules whose __spec__ is None.
    module.__spec__ = importlib.machinery.ModuleSpec("torch_npu", loader=None)
    module.__version__ = f"{sim.torch_npu_version}+simulated"
    module.SIMULATED = True
    module.npu_fusion_attention = npu_fusion_attention
    return module


def _register_factories(sim: SimulatedNPU) -> torch.library.Library:
    lib = torch.library.Library("aten", "IMPL")
    for name in (*_FILLED, *_RANGED, *_RANDOM):
        packet, _, overload = name.partition(".")
        func = getattr(getattr(aten, packet), overload or "default")
        lib.impl(name, lambda *a, _f=func, **k: sim.factory(_f, *a, **k), "PrivateUse1")
    # torch.tensor(..., device=...) copies below the Python key, through these two.
    lib.impl(
        "_copy_from",
        lambda src, dst, non_blocking=False: sim._copy(dst, src, non_blocking),
        "PrivateUse1",
    )
    lib.impl("_copy_from_and_resize", lambda src, dst: sim._copy(dst, src, False), "PrivateUse1")
    return lib


def install(torch_npu_version: str | None = None) -> SimulatedNPU:
    """Make this process look like one with torch_npu and one NPU (idempotent, irreversible).

    ``torch_npu_version`` is what the stand-in reports (``torch_npu.__version__`` gets
    ``+simulated``); by default the npu leg's pin in ci/leg-npu.txt.
    """
    global _INSTALLED
    if _INSTALLED is not None:
        return _INSTALLED
    if torch_npu_version is None:
        from .torch_npu_schema import pinned_version

        torch_npu_version = pinned_version()
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone" or "torch_npu" in sys.modules:
        raise RuntimeError(
            f"PrivateUse1 is already taken ({current!r}) or torch_npu is loaded: not simulating"
        )
    torch_module = types.ModuleType("torch.npu")
    _setup_privateuseone_for_python_backend(BACKEND, backend_module=torch_module)
    sim = SimulatedNPU(torch_npu_version)
    _fill_backend_module(torch_module, sim)
    sim._library = _register_factories(sim)  # kept alive: dropping it unregisters the kernels
    torch.Tensor.pin_memory = lambda self, device=None: sim.pin_memory(self, device)
    torch.Tensor.is_pinned = lambda self, device=None: sim.is_pinned(self, device)
    sim.torch_npu.npu = torch_module
    sys.modules["torch_npu"] = sim.torch_npu
    _INSTALLED = sim
    return sim


def installed() -> SimulatedNPU | None:
    """The simulation installed in this process, if any."""
    return _INSTALLED


def count_syncs() -> AbstractContextManager[SyncCounter]:
    """``with count_syncs() as c:`` counts the block's syncs on the installed simulation."""
    return _state().count_syncs()
