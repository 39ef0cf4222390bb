"""Block AttnRes's aggregator through maintained libraries' Triton kernels: fla-core's `fused_attnres` and
Liger-Kernel's `liger_attn_res`. Both compute naive.py's mixture without a recency bias (the paper's form). They
run where Triton runs: a CUDA GPU, or Triton's interpreter (`TRITON_INTERPRET=1` before triton is imported: tests);
the method checks that first (ops/library_kernels.py)."""

from __future__ import annotations

import torch


def attnres_fla(query: torch.Tensor, sources: list[torch.Tensor], gain: torch.Tensor, eps: float) -> torch.Tensor:
    from fla.ops.attnres import fused_attnres
    return fused_attnres(query, sources, gain, rms_eps=eps)


def attnres_liger(query: torch.Tensor, sources: list[torch.Tensor], gain: torch.Tensor, eps: float) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_attn_res
    return liger_attn_res(torch.stack(sources), query, gain, eps)
