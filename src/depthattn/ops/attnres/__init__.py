"""Block AttnRes's aggregator (docs/method.md#baselines): over sources x_1..x_n (the most recent last),
`sum_i softmax_i(<w * g, x_i / rms(x_i)> [+ b on the last]) x_i`, with a pseudo-query w, an RMSNorm gain g and our
optional recency bias b. `naive.py` is the reference; `fused.py` calls fla-core's and Liger-Kernel's Triton kernels,
which have no recency bias. Each takes (query (D), sources: n tensors (..., D), gain (D), eps) and returns (..., D)."""

from .fused import attnres_fla, attnres_liger
from .naive import attnres_mix, attnres_reference, attnres_weights

ATTNRES_IMPLS = {"reference": attnres_reference, "fla": attnres_fla, "liger": attnres_liger}

__all__ = ["ATTNRES_IMPLS", "attnres_fla", "attnres_liger", "attnres_mix", "attnres_reference", "attnres_weights"]
