"""Checks and measurements of cached inference, and the size of a paged KV cache."""

from __future__ import annotations

import math

import torch
from transformers import ContinuousBatchingConfig, DynamicCache

PAGE_SIZE = 256  # tokens per block of transformers' paged cache (its default)


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


def paged_cache_config(config, max_sequences: int = 8, context: int | None = None,
                       page_size: int = PAGE_SIZE) -> ContinuousBatchingConfig:
    """A paged KV cache (transformers' continuous batching) with room for `max_sequences` sequences of `context`
    tokens (default: the model's max_position_embeddings) at once. Without a `ContinuousBatchingConfig`,
    `generate_batch` and `transformers serve` size the cache from the free memory: most of a CPU machine's RAM,
    allocated at the first request. Use it as `model.generate_batch(prompts, continuous_batching_config=...)`."""
    if max_sequences < 1:
        raise ValueError(f"max_sequences must be >= 1, got {max_sequences}")
    context = context or config.max_position_embeddings
    blocks = max_sequences * math.ceil(context / page_size)
    return ContinuousBatchingConfig(page_size=page_size, num_blocks=blocks, max_batch_tokens=max(context, page_size),
                                    max_requests_per_batch=max_sequences)


def paged_cache_bytes(config, paged: ContinuousBatchingConfig, dtype_bytes: int = 4) -> int:
    """The keys and values a paged cache of `paged.num_blocks` blocks holds: every unrolled step's K and V for
    each of its tokens (what a vanilla decoder's cache holds; depthattn's methods keep no more)."""
    if paged.num_blocks is None:
        raise ValueError("the ContinuousBatchingConfig sets no num_blocks (transformers would size the cache from "
                         "the free memory): make it with paged_cache_config")
    per_token = 2 * config.unrolled_depth * config.num_key_value_heads * config.head_dim * dtype_bytes
    return paged.num_blocks * paged.page_size * per_token
