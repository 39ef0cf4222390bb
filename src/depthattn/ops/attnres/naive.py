"""Block AttnRes's aggregator written out: the reference the libraries' kernels (fused.py) are tested against."""

from __future__ import annotations

import torch

from ..norm import rms_normalize


def attnres_weights(query: torch.Tensor, candidates: torch.Tensor, gain: torch.Tensor, eps: float,
                    recency_bias: torch.Tensor | None = None) -> torch.Tensor:
    """candidates (n, ..., D) -> softmax weights (n, ...) in float32 at least: logits `<query * gain, x / rms(x)>`,
    plus `recency_bias` on the last candidate's where given."""
    normed = rms_normalize(candidates, eps)
    logits = normed @ (query * gain).to(normed.dtype)  # (n, ...)
    if recency_bias is not None:
        logits = torch.cat([logits[:-1], logits[-1:] + recency_bias.to(normed.dtype)])
    return torch.softmax(logits, dim=0)


def attnres_reference(query: torch.Tensor, sources: list[torch.Tensor], gain: torch.Tensor, eps: float,
                      recency_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The softmax mixture of `sources` (n tensors (..., D), the most recent last), in their dtype."""
    candidates = torch.stack(sources)  # (n, ..., D)
    return attnres_mix(attnres_weights(query, candidates, gain, eps, recency_bias), candidates)


def attnres_mix(weights: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """weights (n, ...) over candidates (n, ..., D) -> their weighted sum (..., D), in the candidates' dtype."""
    return (weights[..., None] * candidates).sum(0).to(candidates.dtype)
