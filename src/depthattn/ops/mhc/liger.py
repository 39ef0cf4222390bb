"""mHC's connections through Liger-Kernel's Triton kernels (liger_mhc_coeffs, liger_mhc_pre, liger_mhc_post_res),
set to compute naive.py's: no epsilon in the Sinkhorn projection or in pre, `2 sigmoid` post, float32 streams
allowed, phi in Liger's layout (nD, 2n + n^2). They run where Triton runs: a CUDA GPU, or Triton's interpreter
(`TRITON_INTERPRET=1` before triton is imported: tests); the method checks that first
(ops/library_kernels.py). Liger's coefficient matmul is TF32 on a GPU."""

from __future__ import annotations


def mhc_coefficients_liger(x, phi, bias, alpha, iterations, eps):
    from liger_kernel.transformers.functional import liger_mhc_coeffs
    a_pre, a_post, a_res = alpha
    return liger_mhc_coeffs(x, phi.T, bias, a_pre, a_post, a_res, allow_fp32=True, tmax=iterations, rms_eps=eps,
                            pre_eps=0.0, sinkhorn_eps=0.0, post_mult=2.0)


def streams_pre_liger(x, pre):
    from liger_kernel.transformers.functional import liger_mhc_pre
    return liger_mhc_pre(x, pre)


def streams_post_res_liger(x, out, post, res):
    from liger_kernel.transformers.functional import liger_mhc_post_res
    return liger_mhc_post_res(x, out, post, res)
