"""Dynamic hyper-connections (Zhu et al., arXiv 2409.19606), described: its config fields and
its costs; the module: methods/hyper_connections.py.

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

from ...field_checks import check_int
from .base import ConfigField, FlopTerm
from .streams import MultiStreamDescription


class HyperConnectionsDescription(MultiStreamDescription):
    module = "depthattn.methods.hyper_connections:HyperConnections"
    config_fields = {"hc_streams": ConfigField(4, "n, the residual streams (the expansion rate).")}
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: n residual streams "
        "instead of one, n - 1 extra hidden vectors; over a prefill of T tokens, T x (n - 1)."
    )

    @classmethod
    def check_config(cls, config):
        check_int("hc_streams", config.hc_streams, 1)

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
