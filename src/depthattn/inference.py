"""Checks and measurements of cached inference."""

from __future__ import annotations

import torch
from transformers import DynamicCache


def kv_cache_bytes(cache) -> int:
    """Bytes held by a transformers cache (every layer's keys and values)."""
    return sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values) if t is not None)


@torch.no_grad()
def cached_decoding_error(model, input_ids: torch.Tensor, prefill: int) -> float:
    """Largest |logit difference| between prefill + token-by-token cached decoding and one uncached forward."""
    full = model(input_ids, use_cache=False).logits
    cache = DynamicCache(config=model.config)
    steps = [model(input_ids[:, :prefill], cache=cache, use_cache=True).logits]
    for t in range(prefill, input_ids.shape[1]):
        steps.append(model(input_ids[:, t:t + 1], cache=cache, use_cache=True).logits)
    return (torch.cat(steps, 1) - full).abs().max().item()
