"""Depth mixing in a handful of plain torch ops: fast in eager mode, fused by `torch.compile`.

Same signature and results as the reference `depthattn.ops.depth_mix_reference` (docs/method.md#the-operation).
Two forms, chosen by size:

* many rows (training, prefill): per-source multiply-and-reduce, then a running `w_j * v_j` sum. Nothing is
  stacked or concatenated, so the sources are never copied, and under `torch.compile` (also with
  `fullgraph=True` on the whole model) inductor fuses the scores, the softmax and the mix.
* few rows (eager decoding, `B * Hkv * T <= SMALL_ROWS`): there the cost is per-op dispatch, so the states
  read (one token each) are copied into one tensor, and scores and mix are one batched matmul each: 7 ops
  and a few views, against ~20 ops in the reference. (`baddbmm` with alpha would save the scaling op, but
  in a decode step, between the large projections, it took ~60 us against ~15 us for `bmm` plus a multiply.)
  When the caller does not need the weights (`need_weights=False`: generation, serving), a softmax mix is one
  `scaled_dot_product_attention` per mixed state, which does scores, scale, softmax and sum in one op: about
  half the time of the form above on the 2-core CPU.
"""

from __future__ import annotations

import torch

from depthattn.layer_states import DepthState

# rows (B * Hkv * T) up to which eager calls take the batched-matmul form; above it the per-source form is faster
SMALL_ROWS = 256

# weights and sums in float32 at least (float64 stays float64), as the reference; a dict costs less than an op
_ACC = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def depth_mix_compiled(
    query: torch.Tensor,
    state: DepthState,
    sources: list[DepthState],
    scaling: float,
    rule: str = "softmax",
    mix_states: str = "v",
    score_bias: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[DepthState, torch.Tensor | None]:
    """query: (B, Hq, T, d); `state` and `sources` tensors: (B, Hkv, T, d). Returns (mixed state, weights
    (B, Hkv, T, n) with self last, float32 or float64), as `depthattn.ops.depth_mix_reference`; the weights may be
    None when `need_weights` is False."""
    batch, num_heads, seq_len, head_dim = query.shape
    num_kv_heads = state.score_key.shape[1]
    if not torch.compiler.is_compiling() and batch * num_kv_heads * seq_len <= SMALL_ROWS:
        if not need_weights and rule == "softmax":
            return _mix_small_attention(query, state, sources, scaling, mix_states, score_bias), None
        return _mix_small(query, state, sources, scaling, rule, mix_states, score_bias)
    return _mix_rows(query, state, sources, scaling, rule, mix_states, score_bias)


def _mix_rows(query, state, sources, scaling, rule, mix_states, score_bias):
    batch, num_heads, seq_len, head_dim = query.shape
    num_kv_heads = state.score_key.shape[1]
    group = num_heads // num_kv_heads
    candidates = [*sources, state]
    n = len(candidates)
    dtype = _ACC.get(query.dtype, query.dtype)
    if rule == "linear":
        # a copy, never a view of the parameter (a view made under no_grad would claim a gradient it has not)
        weights = score_bias.to(dtype)[:, None, None, None].expand(n, batch, num_kv_heads, seq_len).contiguous()
    elif rule == "uniform" and score_bias is not None:
        weights = torch.softmax(score_bias.to(dtype), dim=0)[:, None, None, None]
        weights = weights.expand(n, batch, num_kv_heads, seq_len)
    elif rule == "uniform":
        weights = query.new_full((n, batch, num_kv_heads, seq_len), 1.0 / n, dtype=dtype)
    else:
        projected = query.transpose(1, 2)  # (B, T, Hq, d): the q projection's own layout, usually contiguous
        if projected.is_contiguous():  # sum the G heads of a group where they are adjacent in memory
            depth_query = projected.view(batch, seq_len, num_kv_heads, group, head_dim).sum(3, dtype=dtype)
            depth_query = depth_query.transpose(1, 2)  # (B, Hkv, T, d)
        else:
            depth_query = query.view(batch, num_kv_heads, group, seq_len, head_dim).sum(2, dtype=dtype)
        # sources first (dim 0): a softmax over a short leading dim is far cheaper than over a short last dim
        scores = torch.stack([(depth_query * c.score_key).sum(-1) for c in candidates])  # (n, B, Hkv, T)
        scores = scores * (scaling / group)
        if score_bias is not None:
            scores = scores + score_bias.to(dtype)[:, None, None, None]
        weights = torch.softmax(scores, dim=0)

    def mix(tensors: list[torch.Tensor]) -> torch.Tensor:
        out = weights[0, ..., None] * tensors[0]  # in the weights' dtype
        for i in range(1, n):
            out = torch.addcmul(out, weights[i, ..., None], tensors[i])
        return out if out.dtype == tensors[-1].dtype else out.to(tensors[-1].dtype)

    key = mix([c.key for c in candidates]) if "k" in mix_states else state.key
    value = mix([c.value for c in candidates]) if "v" in mix_states else state.value
    return DepthState(state.score_key, key, value), weights.movedim(0, -1)  # (B, Hkv, T, n)


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)  # a no-op .to() still costs a dispatch


def _mix_small(query, state, sources, scaling, rule, mix_states, score_bias):
    # kept short: at this size each Python-level step costs about as much as the arithmetic
    batch, num_heads, seq_len, head_dim = query.shape
    num_kv_heads = state.score_key.shape[1]
    rows, n = batch * num_kv_heads * seq_len, len(sources) + 1
    candidates = [*sources, state]
    softmax, mix_k, mix_v = rule == "softmax", "k" in mix_states, "v" in mix_states
    # one copy of every state this call reads, (rows, groups * n, d): score keys, keys (unless they are the
    # score keys, as in modeling.py), values
    own_keys = mix_k and not (softmax and all(c.key is c.score_key for c in candidates))
    tensors = [c.score_key for c in candidates] if softmax else []
    if own_keys:
        tensors += [c.key for c in candidates]
    if mix_v:
        tensors += [c.value for c in candidates]
    stacked = torch.stack(tensors, dim=-2).view(rows, -1, head_dim)
    dtype = _ACC.get(query.dtype, query.dtype)
    if stacked.dtype != dtype:
        stacked = stacked.to(dtype)
    if softmax:
        depth_query = query.view(batch, num_kv_heads, -1, seq_len, head_dim).sum(2, dtype=dtype)  # (B, Hkv, T, d)
        scores = torch.bmm(depth_query.view(rows, 1, head_dim), stacked[:, :n].mT)  # (rows, 1, n)
        scores = scores * (scaling * num_kv_heads / num_heads)
        weights = torch.softmax(scores if score_bias is None else scores + score_bias.to(dtype), dim=-1)
    elif rule == "linear":
        weights = score_bias.to(dtype).expand(rows, 1, n).contiguous()  # a copy, as above
    elif score_bias is not None:
        weights = torch.softmax(score_bias.to(dtype), dim=0).expand(rows, 1, n)
    else:
        weights = query.new_full((rows, 1, n), 1.0 / n, dtype=dtype)
    out_shape = (batch, num_kv_heads, seq_len, head_dim)
    key, value = state.key, state.value
    if mix_k:
        start = n * softmax if own_keys else 0  # after the score keys, if both were stacked
        key = _cast(torch.bmm(weights, stacked[:, start:start + n]).view(out_shape), key.dtype)
    if mix_v:
        value = _cast(torch.bmm(weights, stacked[:, -n:]).view(out_shape), value.dtype)
    return DepthState(state.score_key, key, value), weights.view(batch, num_kv_heads, seq_len, n)


def _mix_small_attention(query, state, sources, scaling, mix_states, score_bias):
    # the softmax rule without weights: per mixed state, one scaled_dot_product_attention of the group-summed
    # query over the candidates (rows of one query each), scores in the accumulation dtype as above; every state
    # read goes into one stacked copy, so a decoding step launches a stack, a cast, a sum and one attention per
    # mixed state (and a cast back)
    batch, num_heads, seq_len, head_dim = query.shape
    num_kv_heads = state.score_key.shape[1]
    rows, n, dtype = batch * num_kv_heads * seq_len, len(sources) + 1, _ACC.get(query.dtype, query.dtype)
    candidates = [*sources, state]
    mix_k, mix_v = "k" in mix_states, "v" in mix_states
    own_keys = mix_k and not all(c.key is c.score_key for c in candidates)  # usually shared (modeling.py)
    tensors = [c.score_key for c in candidates]
    if own_keys:
        tensors += [c.key for c in candidates]
    if mix_v:
        tensors += [c.value for c in candidates]
    stacked = _cast(torch.stack(tensors, dim=-2).view(rows, 1, -1, head_dim), dtype)  # (rows, 1, m n, d)
    depth_query = query.view(batch, num_kv_heads, -1, seq_len, head_dim).sum(2, dtype=dtype).view(rows, 1, 1, head_dim)
    bias = None if score_bias is None else score_bias.to(dtype).view(1, 1, 1, -1)
    score_keys = stacked[:, :, :n]

    def mix(states, out_dtype):  # states: (rows, 1, n, d)
        out = torch.nn.functional.scaled_dot_product_attention(
            depth_query, score_keys, states, attn_mask=bias, scale=scaling * num_kv_heads / num_heads)
        return _cast(out.view(batch, num_kv_heads, seq_len, head_dim), out_dtype)

    key, value = state.key, state.value
    if mix_k:
        key = mix(stacked[:, :, n:2 * n] if own_keys else score_keys, key.dtype)
    if mix_v:
        value = mix(stacked[:, :, -n:], value.dtype)
    return DepthState(state.score_key, key, value)
