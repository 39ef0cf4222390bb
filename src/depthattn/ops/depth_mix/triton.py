"""Depth mixing as Triton kernels (forward and backward), for GPUs.

The forward reads each source's score key and value once (online softmax over the sources, as flash
attention does over keys) and writes the mixed value and the weights once; the backward reads the sources
and the incoming gradients once more and writes every gradient once. Sources are passed as a table of
pointers and strides, so nothing is stacked or copied, and any number of sources works.

Triton is optional: without it `TRITON_AVAILABLE` is False and `depth_mix_triton` raises. Triton is imported
on the first kernel call, so `TRITON_INTERPRET=1` set before then (and before anything else imports
`triton.language`) runs the kernels in Triton's interpreter on CPU tensors (slowly: for tests).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Sequence

import torch

from depthattn.layer_states import DepthState

# found, not imported: importing triton.language fixes whether its standard library is interpreted, so the
# import waits for the first kernel call (TRITON_INTERPRET=1 set before then runs the kernels on CPU)
TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def triton_runs_on(device: torch.device) -> bool:
    """Whether the Triton kernels can run on tensors of `device` (CUDA/XPU, or any device in interpreter mode)."""
    if not TRITON_AVAILABLE:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return _interpreted_language()
    return device.type in ("cuda", "xpu")


def _interpreted_language() -> bool:
    """True unless triton.language was imported before TRITON_INTERPRET=1 was set (then its standard library
    is compiled, not interpreted, and interpreted kernels fail)."""
    if "triton.language" not in sys.modules:
        return True
    standard = getattr(sys.modules["triton.language"], "standard", None)
    return type(getattr(standard, "sum", None)).__name__ == "InterpretedFunction"


@functools.cache
def _kernels():
    """(forward kernel, backward kernel, torch dtype -> triton dtype), imported on first use."""
    from . import _triton_kernels as k

    tl = k.tl
    dtypes = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32,
              torch.float64: tl.float64}
    return k.forward_kernel, k.backward_kernel, dtypes


def _tables(groups: list[list[torch.Tensor]], device: torch.device) -> list[torch.Tensor]:
    """One int64 table per group of tensors, rows [data pointer, stride_b, stride_h, stride_t], built on the
    host and moved to `device` in a single copy. On CUDA the host table is pinned: a copy from pageable memory
    makes the host wait for the stream's queued work, once per call; a pinned one is queued like a kernel."""
    rows = [[t.data_ptr(), *t.stride()[:3]] for group in groups for t in group]
    table = torch.tensor(rows, dtype=torch.int64)
    if device.type == "cuda":
        table = table.pin_memory()  # torch's pinned-block cache keeps it until the copy has run
    table = table.to(device, non_blocking=True)
    return list(table.split([len(group) for group in groups]))


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _next_power_of_2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _launch_config(seq_len: int, head_dim: int) -> tuple[int, int, int, int]:
    """(BLOCK_D, BLOCK_T, warps, programs along T): tiles of up to 2048 elements (16 per thread)."""
    block_d = _next_power_of_2(head_dim)
    block_t = max(1, min(_next_power_of_2(seq_len), max(16, 2048 // block_d)))
    return block_d, block_t, 4, -(-seq_len // block_t)


def _split(tensors, n: int, mix_k: bool, mix_v: bool):
    """(score keys, keys to mix, values to mix) from the flat input list: n score keys, then n keys if
    mix_k, then n values if mix_v; absent groups are empty lists."""
    score_keys, rest = list(tensors[:n]), list(tensors[n:])
    keys, rest = (rest[:n], rest[n:]) if mix_k else ([], rest)
    values = rest[:n] if mix_v else []
    return score_keys, keys, values


def _one_dtype(group: list[torch.Tensor]) -> list[torch.Tensor]:
    """The group's tensors in one dtype (the kernels read a table's tensors as one type): as they are when they
    share it, else all in their promoted dtype."""
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in group))
    return [t if t.dtype == dtype else t.to(dtype) for t in group]


def _element_types(score_keys, keys, values, tl_dtypes) -> dict:
    """The kernels' per-table element types; an absent group reads as the score keys' type (never loaded)."""
    fallback = score_keys[0].dtype
    return dict(SK_DTYPE=tl_dtypes[fallback], K_DTYPE=tl_dtypes[keys[0].dtype if keys else fallback],
                V_DTYPE=tl_dtypes[values[0].dtype if values else fallback])


class _DepthMixFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, meta, query, *tensors):
        scaling, softmax, mix_k, mix_v, n = meta
        score_keys, keys, values = _split(tensors, n, mix_k, mix_v)
        batch, num_heads, seq_len, head_dim = query.shape
        num_kv_heads = score_keys[0].shape[1]
        device = query.device
        acc = functools.reduce(torch.promote_types, (t.dtype for t in tensors), torch.promote_types(query.dtype,
                                                                                                   torch.float32))
        tables = _tables([score_keys, keys or score_keys, values or score_keys], device)
        shape = (batch, num_kv_heads, seq_len, head_dim)
        out_k = torch.empty(shape, device=device, dtype=keys[0].dtype) if mix_k else None
        out_v = torch.empty(shape, device=device, dtype=values[0].dtype) if mix_v else None
        weights = torch.empty((batch, num_kv_heads, seq_len, n), device=device, dtype=acc)
        block_d, block_t, warps, blocks = _launch_config(seq_len, head_dim)
        grid = (blocks, batch * num_kv_heads)
        forward_kernel, _, tl_dtypes = _kernels()
        forward_kernel[grid](
            query, *[query.stride(i) for i in range(3)], *tables,
            out_k if mix_k else weights, out_v if mix_v else weights, weights,
            n, seq_len, num_kv_heads, torch.full((1,), scaling / (num_heads // num_kv_heads), device=device, dtype=acc),
            G=num_heads // num_kv_heads, D=head_dim, BLOCK_D=block_d, BLOCK_T=block_t,
            SOFTMAX=softmax, MIX_K=mix_k, MIX_V=mix_v, ACC=tl_dtypes[acc],
            **_element_types(score_keys, keys, values, tl_dtypes), num_warps=warps,
        )
        ctx.meta = meta
        ctx.save_for_backward(query, *tensors, weights)
        if not softmax:
            ctx.mark_non_differentiable(weights)
        return out_k, out_v, weights

    @staticmethod
    def backward(ctx, d_out_k, d_out_v, d_weights):
        scaling, softmax, mix_k, mix_v, n = ctx.meta
        query, *tensors, weights = ctx.saved_tensors
        score_keys, keys, values = _split(tensors, n, mix_k, mix_v)
        batch, num_heads, seq_len, head_dim = query.shape
        num_kv_heads = score_keys[0].shape[1]
        device = query.device
        # rebuilt, not kept from forward: saved tensors can come back at new addresses (saved-tensor hooks)
        tables = _tables([score_keys, keys or score_keys, values or score_keys], device)
        shape = (n, batch, num_kv_heads, seq_len, head_dim)
        dq = torch.empty_like(query, memory_format=torch.contiguous_format) if softmax else None
        dsk = torch.empty(shape, device=device, dtype=score_keys[0].dtype) if softmax else None
        dk = torch.empty(shape, device=device, dtype=keys[0].dtype) if mix_k else None
        dv = torch.empty(shape, device=device, dtype=values[0].dtype) if mix_v else None
        scratch = torch.empty_like(weights) if softmax else weights
        has_dw = softmax and d_weights is not None
        d_out_k = d_out_k.contiguous() if mix_k and d_out_k is not None else None
        d_out_v = d_out_v.contiguous() if mix_v and d_out_v is not None else None
        out_shape = (batch, num_kv_heads, seq_len, head_dim)
        if mix_k and d_out_k is None:
            d_out_k = torch.zeros(out_shape, device=device, dtype=keys[0].dtype)
        if mix_v and d_out_v is None:
            d_out_v = torch.zeros(out_shape, device=device, dtype=values[0].dtype)
        block_d, block_t, warps, blocks = _launch_config(seq_len, head_dim)
        grid = (blocks, batch * num_kv_heads)
        _, backward_kernel, tl_dtypes = _kernels()
        dummy = weights
        backward_kernel[grid](
            query, *[query.stride(i) for i in range(3)], *tables,
            weights, d_weights.contiguous() if has_dw else dummy,
            d_out_k if mix_k else dummy, d_out_v if mix_v else dummy,
            dq if softmax else dummy, dsk if softmax else dummy, dk if mix_k else dummy, dv if mix_v else dummy,
            scratch, n, seq_len, num_kv_heads,
            torch.full((1,), scaling / (num_heads // num_kv_heads), device=device, dtype=weights.dtype),
            batch * num_kv_heads * seq_len * head_dim,
            G=num_heads // num_kv_heads, D=head_dim, BLOCK_D=block_d, BLOCK_T=block_t,
            SOFTMAX=softmax, MIX_K=mix_k, MIX_V=mix_v, HAS_DW=has_dw, ACC=tl_dtypes[weights.dtype],
            **_element_types(score_keys, keys, values, tl_dtypes), num_warps=warps,
        )
        grads: list[Sequence[torch.Tensor | None]] = [dsk.unbind(0) if dsk is not None else [None] * n]
        if dk is not None:  # mix_k
            grads.append(dk.unbind(0))
        if dv is not None:  # mix_v
            grads.append(dv.unbind(0))
        return None, dq, *(g for group in grads for g in group)


def depth_mix_triton(
    query: torch.Tensor,
    state: DepthState,
    sources: list[DepthState],
    scaling: float,
    rule: str = "softmax",
    mix_states: str = "v",
    score_bias: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[DepthState, torch.Tensor | None]:
    """Same contract as `depthattn.ops.depth_mix_reference`, computed by the Triton kernels (forward and backward)."""
    if score_bias is not None:
        raise ValueError("the Triton kernels take no score bias; use the compiled or reference depth mixing")
    if not TRITON_AVAILABLE:
        raise RuntimeError("depth_mix_triton needs the `triton` package (pip install triton)")
    if not triton_runs_on(query.device):
        raise RuntimeError(f"Triton kernels do not run on {query.device} tensors (set TRITON_INTERPRET=1 "
                           "before the first call to interpret them on CPU)")
    candidates = [*sources, state]
    mix_k, mix_v = "k" in mix_states, "v" in mix_states
    groups = [[c.score_key for c in candidates]]
    if mix_k:
        groups.append([c.key for c in candidates])
    if mix_v:
        groups.append([c.value for c in candidates])
    dtypes = {t.dtype for group in groups for t in group} | {query.dtype}
    if dtypes - set(_SUPPORTED):
        raise TypeError(f"depth_mix_triton supports {list(_SUPPORTED)}, got {sorted(map(str, dtypes))}")
    tensors = [_last_dim_contiguous(t) for group in groups for t in _one_dtype(group)]
    meta = (float(scaling), rule != "uniform", mix_k, mix_v, len(candidates))
    out_k, out_v, weights = _DepthMixFunction.apply(meta, _last_dim_contiguous(query), *tensors)
    key = out_k if mix_k else state.key
    value = out_v if mix_v else state.value
    return DepthState(state.score_key, key, value), weights
