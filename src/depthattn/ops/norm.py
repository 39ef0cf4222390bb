"""RMS normalisation without a gain, as the aggregators of AttnRes, mHC and hyper-connections compute it."""

from __future__ import annotations

import torch


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dimension, in float32 at least."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
