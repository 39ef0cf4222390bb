"""mHC's connections written out: the reference Liger-Kernel's kernels (liger.py) are tested against."""

from __future__ import annotations

import torch

from ..norm import rms_normalize


def sinkhorn(logits: torch.Tensor, iterations: int) -> torch.Tensor:
    """Project exp(logits) (..., n, n) onto doubly stochastic matrices by alternate row and column normalisation."""
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(iterations):
        m = m / m.sum(-1, keepdim=True)
        m = m / m.sum(-2, keepdim=True)
    return m


def mhc_coefficients(x: torch.Tensor, phi: torch.Tensor, bias: torch.Tensor, alpha: torch.Tensor, iterations: int,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From the streams x (B, T, n, D), one sublayer's phi (2n + n^2, nD), bias (2n + n^2) and alpha (3: pre, post,
    res): pre (B, T, n), post (B, T, n) and the doubly stochastic res (B, T, n, n), in float32 at least."""
    n = x.shape[-2]
    z = rms_normalize(x.flatten(-2), eps)  # (B, T, nD)
    pre, post, res = (z @ phi.to(z.dtype).T).split([n, n, n * n], dim=-1)
    b_pre, b_post, b_res = bias.to(z.dtype).split([n, n, n * n])
    a_pre, a_post, a_res = alpha.to(z.dtype)
    pre = torch.sigmoid(a_pre * pre + b_pre)
    post = 2 * torch.sigmoid(a_post * post + b_post)
    res = sinkhorn((a_res * res + b_res).unflatten(-1, (n, n)), iterations)
    return pre, post, res


def streams_pre(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """The sublayer's input sum_i pre_i x_i (B, T, D), in x's dtype."""
    return (pre[..., None] * x).sum(-2).to(x.dtype)


def streams_post_res(x: torch.Tensor, out: torch.Tensor, post: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    """The streams after the sublayer, x_i <- sum_j res_ij x_j + post_i * out (B, T, n, D), in x's dtype."""
    return (res @ x.to(res.dtype) + post[..., None] * out[..., None, :]).to(x.dtype)
