"""Block AttnRes's aggregator through maintained libraries' Triton kernels: fla-core's `fused_attnres` and
Liger-Kernel's `liger_attn_res`. Both compute naive.py's mixture without a recency bias (the paper's form). They
run where Triton runs: a CUDA GPU, or Triton's interpreter (`TRITON_INTERPRET=1` before triton is imported: tests)."""

from __future__ import annotations

import importlib.util
import os

import torch

INSTALL = {"fla": "pip install fla-core (with triton)", "liger": "pip install 'depthattn[liger]'"}


def check_runs(impl: str, device: torch.device) -> None:
    """Raise, naming the fix, where the library of `impl` is missing or its kernels cannot run on `device`."""
    missing = [name for name in ({"fla": "fla", "liger": "liger_kernel"}[impl], "triton")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"attnres_impl {impl!r} needs {' and '.join(missing)}: {INSTALL[impl]}; or use "
                           "attnres_impl 'reference'")
    if device.type not in ("cuda", "xpu") and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(f"attnres_impl {impl!r} runs Triton kernels, which need a GPU; the tensors are on "
                           f"{device.type}: use attnres_impl 'reference' there")


def attnres_fla(query: torch.Tensor, sources: list[torch.Tensor], gain: torch.Tensor, eps: float) -> torch.Tensor:
    check_runs("fla", sources[0].device)
    from fla.ops.attnres import fused_attnres
    return fused_attnres(query, sources, gain, rms_eps=eps)


def attnres_liger(query: torch.Tensor, sources: list[torch.Tensor], gain: torch.Tensor, eps: float) -> torch.Tensor:
    check_runs("liger", sources[0].device)
    from liger_kernel.transformers.functional import liger_attn_res
    return liger_attn_res(torch.stack(sources), query, gain, eps)
