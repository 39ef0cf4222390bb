"""mHC's module (the method, its initialisation and costs: descriptions/mhc.py): the projections phi, their biases
and gating scales, the Sinkhorn projection and the final stream weights."""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import initialization as init

from .base import rms_normalize
from .descriptions.mhc import MHCDescription
from .streams import MultiStreamResidual


def sinkhorn(logits: torch.Tensor, iterations: int) -> torch.Tensor:
    """Project exp(logits) (..., n, n) onto doubly stochastic matrices by alternate row and column normalisation."""
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(iterations):
        m = m / m.sum(-1, keepdim=True)
        m = m / m.sum(-2, keepdim=True)
    return m


class MHC(MHCDescription, MultiStreamResidual):
    def __init__(self, config):
        super().__init__(config, config.mhc_streams)
        n, size = self.num_streams, config.hidden_size
        self.sinkhorn_iters, self.eps = config.mhc_sinkhorn_iters, config.rms_norm_eps
        self.alpha_init, self.std = config.mhc_alpha_init, config.initializer_range
        self.phi = nn.Parameter(torch.empty(self.num_sublayers, 2 * n + n * n, n * size))
        self.bias = nn.Parameter(torch.empty(self.num_sublayers, 2 * n + n * n))
        self.alpha = nn.Parameter(torch.empty(self.num_sublayers, 3))  # pre, post, res
        self.final_logits = nn.Parameter(torch.empty(n))

    def reset_parameters(self):
        n, like = self.num_streams, dict(dtype=self.bias.dtype, device=self.bias.device)
        init.normal_(self.phi, mean=0.0, std=self.std)
        bias = torch.cat([torch.full((n,), -math.log(n - 1), **like), torch.zeros(n + n * n, **like)])
        init.copy_(self.bias, bias.expand(self.bias.shape))
        init.constant_(self.alpha, self.alpha_init)
        init.zeros_(self.final_logits)

    def coefficients(self, x, sublayer):
        n = self.num_streams
        z = rms_normalize(x.flatten(-2), self.eps)  # (B, T, nD) float32 at least; the parameters at its width
        pre, post, res = (z @ self.phi[sublayer].to(z.dtype).T).split([n, n, n * n], dim=-1)
        b_pre, b_post, b_res = self.bias[sublayer].to(z.dtype).split([n, n, n * n])
        a_pre, a_post, a_res = self.alpha[sublayer].to(z.dtype)
        pre = torch.sigmoid(a_pre * pre + b_pre)
        post = 2 * torch.sigmoid(a_post * post + b_post)
        res = sinkhorn((a_res * res + b_res).unflatten(-1, (n, n)), self.sinkhorn_iters)
        return pre, post, res

    def final(self, stream):
        weights = torch.softmax(self.final_logits.to(torch.promote_types(stream.x.dtype, torch.float32)), dim=0)
        return (weights[:, None] * stream.x).sum(-2).to(stream.x.dtype)
