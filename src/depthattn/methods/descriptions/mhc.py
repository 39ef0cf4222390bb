"""mHC, manifold-constrained hyper-connections (Xie et al., DeepSeek, arXiv 2512.24880), described: its config
fields and its costs; the module: methods/mhc.py.

`n = mhc_streams` residual streams, the embedding copied into each. Before sublayer `s`, the RMS-normalised
flattened streams `z` (1 x nD) give, through one projection `phi_s` (nD -> 2n + n^2), gating scales `alpha_s`
and biases `b_s`:

    pre  = sigmoid(alpha_pre  * z phi_pre  + b_pre)                   (n)    the sublayer reads sum_i pre_i x_i
    post = 2 sigmoid(alpha_post * z phi_post + b_post)                (n)    stream i receives post_i * out
    res  = Sinkhorn(alpha_res * mat(z phi_res) + b_res)               (n x n) doubly stochastic stream mix

with `mhc_sinkhorn_iters` Sinkhorn-Knopp iterations (exp, then alternately normalise rows and columns).
The final hidden state averages the streams with learned softmax weights.

Parameters per sublayer: `(2n + n^2) (nD + 1) + 3`; plus `n` final weights.
Initialisation (near a plain residual): `alpha = mhc_alpha_init` (0.01), `phi ~ N(0, initializer_range)`,
`b_pre = -log(n - 1)` (pre = 1/n each: the sublayer reads the stream mean), `b_post = 0` (post = 1: every
stream receives the whole output), `b_res = 0` (res ~ 1/n everywhere, the centre of the doubly stochastic
matrices, where 20 Sinkhorn iterations converge to float precision; an identity-dominant start converges far
slower) and zero final logits (the plain mean). Identical streams stay identical under any doubly stochastic
res, so with alpha = 0 the model computes exactly the vanilla decoder's function; with 0.01 it starts close.
"""

from __future__ import annotations

from ...field_checks import check_choice, check_int, check_number
from .base import ConfigField, FlopTerm
from .streams import MultiStreamDescription

IMPL_NAMES = ("reference", "liger")  # depthattn.ops.mhc.MHC_IMPLS


class MHCDescription(MultiStreamDescription):
    module = "depthattn.methods.mhc:MHC"
    config_fields = {
        "mhc_streams": ConfigField(4, "n, the residual streams (at least 2)."),
        "mhc_sinkhorn_iters": ConfigField(20, "Sinkhorn-Knopp iterations."),
        "mhc_alpha_init": ConfigField(0.01, "Initial value of the three gating scales alpha."),
        "mhc_impl": ConfigField("reference", (
            'How the coefficients, the read and the update are computed, same results: "reference" (written out) or '
            '"liger" (Liger-Kernel\'s Triton kernels: a GPU, `pip install \'depthattn[liger]\'`).')),
    }
    switchable_fields = ("mhc_impl",)
    switch_values = {"mhc_impl": ("reference",)}  # "liger" needs a GPU
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: n residual streams "
        "instead of one, n - 1 extra hidden vectors (3 at n = 4); over a prefill of T tokens, T x (n - 1)."
    )

    @classmethod
    def check_config(cls, config):
        check_int("mhc_streams", config.mhc_streams, 2)
        check_int("mhc_sinkhorn_iters", config.mhc_sinkhorn_iters, 1)
        check_number("mhc_alpha_init", config.mhc_alpha_init, 0)
        check_choice("mhc_impl", config.mhc_impl, IMPL_NAMES)
        streams = config.mhc_streams
        if config.mhc_impl == "liger" and streams & (streams - 1):
            raise ValueError(f"mhc_impl 'liger' needs mhc_streams a power of two (Liger-Kernel's kernels), got "
                             f"{streams}: set mhc_streams to 2, 4 or 8, or use mhc_impl 'reference'")

    @classmethod
    def streams(cls, config):
        return config.mhc_streams

    @classmethod
    def extra_parameters(cls, config):
        n, D, S = config.mhc_streams, config.hidden_size, 2 * config.unrolled_depth
        return S * ((2 * n + n * n) * (n * D + 1) + 3) + n  # phi, its biases, 3 alphas; n final logits

    @classmethod
    def coefficient_term(cls, config):  # one projection phi: nD -> 2n + n^2 (pre, post, res logits)
        n, D, S = config.mhc_streams, config.hidden_size, 2 * config.unrolled_depth
        return FlopTerm("coefficient projection phi (nD -> 2n + n^2) per sublayer", S * 2 * n * D * (2 * n + n * n),
                        "matmul", "weights")

    @classmethod
    def final_term(cls, config):
        return FlopTerm("final softmax-weighted mean of the streams: in our model only",
                        2 * config.mhc_streams * config.hidden_size, "elementwise", paper=False)
