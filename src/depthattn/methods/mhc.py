"""mHC's module (the method, its initialisation and costs: descriptions/mhc.py): the projections phi, their biases
and gating scales and the final stream weights; the coefficients, the read and the update are ops/mhc's
(`mhc_impl`)."""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import initialization as init

from ..ops.library_kernels import check_library_kernels
from ..ops.mhc import MHC_IMPLS
from .descriptions.mhc import MHCDescription
from .streams import MultiStreamResidual


class MHC(MHCDescription, MultiStreamResidual):
    def __init__(self, config):
        super().__init__(config, config.mhc_streams)
        self.switch("mhc_impl", config.mhc_impl)
        n, size = self.num_streams, config.hidden_size
        self.sinkhorn_iters, self.eps = config.mhc_sinkhorn_iters, config.rms_norm_eps
        self.alpha_init, self.std = config.mhc_alpha_init, config.initializer_range
        self.phi = nn.Parameter(torch.empty(self.num_sublayers, 2 * n + n * n, n * size))
        self.bias = nn.Parameter(torch.empty(self.num_sublayers, 2 * n + n * n))
        self.alpha = nn.Parameter(torch.empty(self.num_sublayers, 3))  # pre, post, res
        self.final_logits = nn.Parameter(torch.empty(n))

    def reset_parameters(self):
        n = self.num_streams
        init.normal_(self.phi, mean=0.0, std=self.std)
        bias = torch.cat([self.bias.new_full((n,), -math.log(n - 1)), self.bias.new_zeros(n + n * n)])
        init.copy_(self.bias, bias.expand(self.bias.shape))
        init.constant_(self.alpha, self.alpha_init)
        init.zeros_(self.final_logits)

    def switch(self, name, value):
        self.impl, self.connections = value, MHC_IMPLS[value]  # name: mhc_impl

    def init(self, embeds):
        check_library_kernels("mhc_impl", self.impl, embeds.device)
        return super().init(embeds)

    def coefficients(self, x, sublayer):
        return self.connections.coefficients(x, self.phi[sublayer], self.bias[sublayer], self.alpha[sublayer],
                                             self.sinkhorn_iters, self.eps)

    def final(self, stream):
        weights = torch.softmax(self.final_logits.to(torch.promote_types(stream.x.dtype, torch.float32)), dim=0)
        return (weights[:, None] * stream.x).sum(-2).to(stream.x.dtype)
