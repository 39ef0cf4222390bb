"""The reference: the combined softmax over sequence and depth scores, written out."""

from __future__ import annotations

import torch


def additive_mask(mask: torch.Tensor | None, query: torch.Tensor, length: int) -> torch.Tensor:
    """Any attention mask as an additive float mask broadcastable to (B, H, T, S); a bool mask is True where a
    query attends. None means what it means to transformers' SDPA path (is_causal): for several queries causal from
    the first key (query i sees keys 0..i; a static cache's prefill has more key slots than queries, empty past
    the prompt), for one query every key."""
    T = query.shape[-2]
    if mask is None:
        keys = torch.arange(length, device=query.device)
        rows = torch.arange(T, device=query.device) if T > 1 else torch.full((1,), length - 1, device=query.device)
        mask = keys[None, :] <= rows[:, None]  # (T, S)
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, float("-inf"))
    return at_least_float32(mask)


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def depth_scores(query: torch.Tensor, depth_key: torch.Tensor, scale: float) -> torch.Tensor:
    """query (B, Hq, T, d) against the depth keys of its own token (B, Hkv, T, n, d): (B, Hq, T, n), float32 at
    least.
    Query head h reads KV head h // (Hq / Hkv), as repeat_kv groups them."""
    B, Hq, T, d = query.shape
    Hkv = depth_key.shape[1]
    grouped = at_least_float32(query.view(B, Hkv, Hq // Hkv, T, d))
    return torch.einsum("bhgtd,bhtnd->bhgtn", grouped, at_least_float32(depth_key)).reshape(B, Hq, T, -1) * scale


def depth_mix(weights: torch.Tensor, depth_value: torch.Tensor) -> torch.Tensor:
    """Weights (B, Hq, T, n) over the depth values (B, Hkv, T, n, d): (B, Hq, T, d)."""
    B, Hq, T, n = weights.shape
    Hkv = depth_value.shape[1]
    grouped = weights.view(B, Hkv, Hq // Hkv, T, n)
    return torch.einsum("bhgtn,bhtnd->bhgtd", grouped, depth_value.to(weights.dtype)).reshape(B, Hq, T, -1)


def moda_attention_reference(query, key, value, depth_key, depth_value, mask, scale: float):
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # (B, Hq, S, d)
    sequence = torch.matmul(at_least_float32(query), at_least_float32(key).transpose(2, 3)) * scale  # (B, Hq, T, S)
    sequence = sequence + additive_mask(mask, query, key.shape[2])
    depth = depth_scores(query, depth_key, scale)  # (B, Hq, T, n)
    weights = torch.softmax(torch.cat([sequence, depth], dim=-1), dim=-1)  # one softmax over both
    seq_weights, depth_weights = weights.split([sequence.shape[-1], depth.shape[-1]], dim=-1)
    out = torch.matmul(seq_weights, at_least_float32(value)) + depth_mix(depth_weights, depth_value)  # (B, Hq, T, d)
    return out.to(query.dtype).transpose(1, 2).contiguous(), seq_weights.to(query.dtype)
