"""Dynamic hyper-connections (Zhu et al., arXiv 2409.19606).

`n = hc_streams` residual streams H (n x D), the embedding copied into each. Before sublayer `s`, with
`Hn = RMSNorm_g(H)` per stream (the paper's `norm`; RMSNorm to match the backbone):

    A_m = s_alpha * tanh(Hn w_m) + A_m_static       (n)      the sublayer reads sum_i A_m,i H_i
    A_r = s_alpha * tanh(Hn W_r) + A_r_static       (n x n)  new stream j = sum_i A_r,ij H_i + B_j * out
    B   = s_beta  * tanh(Hn w_b) + B_static         (n)

The final hidden state is the sum of the streams (then the final norm), as in the paper.

Parameters per sublayer: `D (3 + n)` (gain, w_m, w_b, W_r) `+ 2 + 2n + n^2` (scales, static A_m, B, A_r).
Initialisation as in the paper: `A_m_static = e_{s mod n}`, `A_r_static = I`, `B_static = 1`, dynamic weights
zero, `s_alpha = s_beta = 0.01`, `g = 1`; the streams then stay identical and the model computes the vanilla
decoder's function (the final sum is n times the vanilla hidden state, which the final RMSNorm undoes up to eps).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from ..config import ConfigField, check_int
from .base import FlopTerm, rms_normalize
from .streams import MultiStreamResidual

SCALE_INIT = 0.01


class HyperConnections(MultiStreamResidual):
    config_fields = {"hc_streams": ConfigField(4, "n, the residual streams (the expansion rate).")}
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: n residual streams "
        "instead of one, n - 1 extra hidden vectors; over a prefill of T tokens, T x (n - 1)."
    )

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

    @classmethod
    def check_config(cls, config):
        check_int("hc_streams", config.hc_streams, 1)

    def reset_parameters(self):
        n, count = self.num_streams, self.num_sublayers
        init.ones_(self.gain)
        for weight in (self.w_pre, self.w_post, self.w_res):
            init.zeros_(weight)
        init.constant_(self.scales, SCALE_INIT)
        like = dict(dtype=self.static_pre.dtype, device=self.static_pre.device)
        init.copy_(self.static_pre, torch.eye(n, **like)[torch.arange(count, device=like["device"]) % n])  # e_{s mod n}
        init.ones_(self.static_post)
        init.copy_(self.static_res, torch.eye(n, **like).expand(count, n, n))

    @classmethod
    def streams(cls, config):
        return config.hc_streams

    @classmethod
    def extra_parameters(cls, config):
        n, D, S = config.hc_streams, config.hidden_size, 2 * config.unrolled_depth
        return S * (D * (3 + n) + 2 + 2 * n + n * n)  # gain, w_m, w_b, W_r; 2 scales, A_m, B, A_r static

    @classmethod
    def coefficient_term(cls, config):  # w_m, w_b (nD each: D per stream) and W_r (D -> n per stream)
        n, D, S = config.hc_streams, config.hidden_size, 2 * config.unrolled_depth
        return FlopTerm("coefficient projections w_m, w_b, W_r per sublayer", S * 2 * n * D * (n + 2), "matmul",
                        "weights")

    @classmethod
    def final_term(cls, config):
        return FlopTerm("final sum of the streams: in our model only", config.hc_streams * config.hidden_size,
                        "elementwise", paper=False)

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
