"""The plain reference for depth mixing (docs/method.md#the-operation); every fast path is tested against it."""

from __future__ import annotations

from typing import cast

import torch

from depthattn.layer_states import DepthState


def depth_mix_reference(
    query: torch.Tensor,
    state: DepthState,
    sources: list[DepthState],
    scaling: float,
    rule: str = "softmax",
    mix_states: str = "v",
    score_bias: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[DepthState, torch.Tensor | None]:
    """Mix the states of `sources` (earlier layers, same tokens) into this layer's `state`.

    query: (B, Hq, T, d); every tensor of `state` and `sources`: (B, Hkv, T, d); score_bias: (len(sources) + 1,),
    added to the scores (zero for the uniform rule) before the softmax; for the linear rule, the weights themselves
    (not normalised).
    Returns the mixed state and the depth weights (B, Hkv, T, len(sources) + 1), self last, in float32
    (float64 for a float64 model). The reference always computes the weights, whatever `need_weights`.
    """
    batch, num_heads, seq_len, head_dim = query.shape
    num_kv_heads = state.score_key.shape[1]
    candidates = [*sources, state]
    dtype = torch.promote_types(query.dtype, torch.float32)  # weights and sums in float32 at least
    if rule == "linear":
        if score_bias is None:
            raise ValueError("the linear rule weighs the sources by score_bias alone: pass score_bias")
        # a copy, never a view of the parameter (a view made under no_grad would claim a gradient it has not)
        weights = score_bias.to(dtype).expand(batch, num_kv_heads, seq_len, len(candidates)).contiguous()
    elif rule == "uniform" and score_bias is None:
        weights = query.new_full((batch, num_kv_heads, seq_len, len(candidates)), 1.0 / len(candidates), dtype=dtype)
    else:
        if rule == "uniform":
            scores = query.new_zeros((batch, num_kv_heads, seq_len, len(candidates)), dtype=dtype)
        else:
            # the group-mean query: heads g*G .. g*G+G-1 share KV head g, as in repeat_kv
            groups = query.to(dtype).view(batch, num_kv_heads, num_heads // num_kv_heads, seq_len, head_dim)
            depth_query = groups.mean(2)  # (B, Hkv, T, d)
            scores = torch.stack([(depth_query * c.score_key.to(dtype)).sum(-1) for c in candidates], dim=-1)
            scores = scores * scaling
        if score_bias is not None:
            scores = scores + score_bias.to(dtype)
        weights = torch.softmax(scores, dim=-1)  # (B, Hkv, T, n)

    def mix(tensors: list[torch.Tensor]) -> torch.Tensor:
        mixed = cast(torch.Tensor, sum(weights[..., i, None] * t for i, t in enumerate(tensors)))  # weights' dtype
        return mixed.to(tensors[-1].dtype)

    key = mix([c.key for c in candidates]) if "k" in mix_states else state.key
    value = mix([c.value for c in candidates]) if "v" in mix_states else state.value
    return DepthState(state.score_key, key, value), weights
