"""Where the maintained libraries' Triton kernels behind the baselines' kernel fields can run (ops/attnres/fused.py,
ops/mhc/liger.py): a method module checks its field's value once per forward and the refusal names the fix."""

from __future__ import annotations

import functools
import importlib.util

import torch

from .depth_mix.triton import triton_runs_on

# a kernel field's value that runs a library: (the module to find, its install command)
LIBRARIES = {"fla": ("fla", "pip install fla-core triton"), "liger": ("liger_kernel", "pip install 'depthattn[liger]'")}


def check_library_kernels(field: str, impl: str, device: torch.device) -> None:
    """Raise, naming the fix, where `impl` (a value of the kernel field `field`) runs a library that is missing or
    whose Triton kernels cannot run on `device`; any other value (the reference) always runs."""
    if impl not in LIBRARIES:
        return
    library, install = LIBRARIES[impl]
    if missing := _missing(library):
        raise RuntimeError(f"{field} {impl!r} needs {' and '.join(missing)}: {install}; or use {field} 'reference'")
    if not triton_runs_on(device):
        raise RuntimeError(f"{field} {impl!r} runs Triton kernels, which need a GPU; the tensors are on "
                           f"{device.type}: use {field} 'reference' there")


@functools.cache  # asked every forward pass: the installed packages do not change while a model runs
def _missing(library: str) -> tuple[str, ...]:
    return tuple(name for name in (library, "triton") if importlib.util.find_spec(name) is None)
