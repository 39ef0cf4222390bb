"""Where a maintained library's Triton kernels can run (the baselines' `*_impl` fields: ops/attnres/fused.py,
ops/mhc/liger.py), refused with the fix otherwise."""

from __future__ import annotations

import importlib.util

import torch

from .depth_mix.triton import triton_runs_on


def check_library_kernels(field: str, impl: str, library: str, install: str, device: torch.device) -> None:
    """Raise, naming the fix, where `library` or triton is missing or Triton cannot run on `device`."""
    missing = [name for name in (library, "triton") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"{field} {impl!r} needs {' and '.join(missing)}: {install}; or use {field} 'reference'")
    if not triton_runs_on(device):
        raise RuntimeError(f"{field} {impl!r} runs Triton kernels, which need a GPU; the tensors are on "
                           f"{device.type}: use {field} 'reference' there")
