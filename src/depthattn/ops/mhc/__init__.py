"""mHC's connections (docs/method.md#baselines): per sublayer, coefficients (pre, post, the Sinkhorn-projected res)
from the streams, the sublayer's input `sum_i pre_i x_i` and the update `x_i <- sum_j res_ij x_j + post_i out`.
`naive.py` is the reference; `liger.py` runs Liger-Kernel's Triton kernels. MHC_IMPLS maps each `mhc_impl` to its
(coefficients, pre, post_res) functions."""

from collections.abc import Callable
from typing import NamedTuple

from .liger import mhc_coefficients_liger, streams_post_res_liger, streams_pre_liger
from .naive import mhc_coefficients, sinkhorn, streams_post_res, streams_pre


class MHCOps(NamedTuple):
    coefficients: Callable
    pre: Callable
    post_res: Callable


MHC_IMPLS = {
    "reference": MHCOps(mhc_coefficients, streams_pre, streams_post_res),
    "liger": MHCOps(mhc_coefficients_liger, streams_pre_liger, streams_post_res_liger),
}

__all__ = ["MHC_IMPLS", "MHCOps", "mhc_coefficients", "sinkhorn", "streams_post_res", "streams_pre"]
