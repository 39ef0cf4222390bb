"""Dynamic hyper-connections' module (the method, its initialisation and costs: descriptions/hyper_connections.py):
the dynamic and static weights of every sublayer."""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from .base import rms_normalize
from .descriptions.hyper_connections import HyperConnectionsDescription
from .streams import MultiStreamResidual

SCALE_INIT = 0.01


class HyperConnections(HyperConnectionsDescription, MultiStreamResidual):
    def __init__(self, config):
        super().__init__(config, config.hc_streams)
        n, size, count = self.num_streams, config.hidden_size, self.num_sublayers
        self.eps = config.rms_norm_eps
        self.gain = nn.Parameter(torch.empty(count, size))
        self.w_pre = nn.Parameter(torch.empty(count, size))        # w_m
        self.w_post = nn.Parameter(torch.empty(count, size))       # w_beta
        self.w_res = nn.Parameter(torch.empty(count, size, n))     # W_r
        self.scales = nn.Parameter(torch.empty(count, 2))          # s_alpha, s_beta
        self.static_pre = nn.Parameter(torch.empty(count, n))      # A_m
        self.static_post = nn.Parameter(torch.empty(count, n))     # B
        self.static_res = nn.Parameter(torch.empty(count, n, n))   # A_r

    def reset_parameters(self):
        n, count = self.num_streams, self.num_sublayers
        init.ones_(self.gain)
        for weight in (self.w_pre, self.w_post, self.w_res):
            init.zeros_(weight)
        init.constant_(self.scales, SCALE_INIT)
        eye = torch.eye(n, dtype=self.static_pre.dtype, device=self.static_pre.device)
        init.copy_(self.static_pre, eye[torch.arange(count, device=eye.device) % n])  # e_{s mod n}
        init.ones_(self.static_post)
        init.copy_(self.static_res, eye.expand(count, n, n))

    def coefficients(self, x, sublayer):
        s = sublayer
        normed = rms_normalize(x, self.eps)  # (B, T, n, D), float32 at least
        wide = normed.dtype  # the parameters at the same width (float32, or float64 for a float64 model)
        normed = normed * self.gain[s].to(wide)
        s_alpha, s_beta = self.scales[s].to(wide)
        pre = s_alpha * torch.tanh(normed @ self.w_pre[s].to(wide)) + self.static_pre[s].to(wide)
        post = s_beta * torch.tanh(normed @ self.w_post[s].to(wide)) + self.static_post[s].to(wide)
        a_r = s_alpha * torch.tanh(normed @ self.w_res[s].to(wide)) + self.static_res[s].to(wide)  # (B, T, n, n)
        return pre, post, a_r.transpose(-1, -2)  # res_ji = A_r,ij: new stream j reads A_r[:, j]

    def final(self, stream):
        return stream.x.sum(-2)
