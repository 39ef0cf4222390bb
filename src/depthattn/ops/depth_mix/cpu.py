"""Depth mixing as one C++ op for CPU inference (`cpu_kernel.cpp`), for eager decoding.

In an eager decoding step each mixing call is a handful of tiny torch ops, and their dispatch, not the
arithmetic, is what Depth-Attention adds over vanilla. The kernel does a call's scores, softmax and mixes in one
op, reading the sources through their strides.

The kernel is compiled on first use with torch's C++ extension builder (a C++ compiler and ninja; about 20 s
once) into torch's extensions folder, under a name holding the hash of its source, flags, torch and Python
versions; any checkout or venv with the same ones loads that build instead of compiling again. Calls that need
gradients, and tensors that are not on the CPU, take the compiled form (`compiled.py`), so a model set to
`depth_impl="cpu"` still trains.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import torch
from filelock import FileLock, Timeout  # a dependency of torch, which locks its builds with it from 2.15

from depthattn.layer_states import DepthState

from .compiled import depth_mix_compiled

_SOURCE = Path(__file__).with_name("cpu_kernel.cpp")
_FLAGS = ["-O3"]


def _build_folder() -> Path:
    """Where the kernel is built: torch's extensions folder, one name per source, flags, torch and Python."""
    from torch.utils import cpp_extension

    key = f"{_FLAGS} torch {torch.__version__} python {sys.version_info[:2]}".encode() + _SOURCE.read_bytes()
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return Path(root) / f"depthattn_cpu_kernel_{hashlib.sha256(key).hexdigest()[:16]}"


def _load_built(folder: Path):
    """The module built earlier in `folder` (by any checkout), or None: none there, or one still being built."""
    built = folder / f"{folder.name}.so"
    if not built.is_file() or _being_built(folder):
        return None
    spec = importlib.util.spec_from_file_location(folder.name, built)
    if spec is None or spec.loader is None:  # not loadable as an extension module: build it again
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:  # not loadable here after all: build it again
        return None
    return module


def _being_built(folder: Path) -> bool:
    """Whether a build holds `folder`'s lock: torch up to 2.14 holds it by the lock file's existence (FileBaton),
    torch 2.15 by an OS advisory lock on that file (filelock), which stays after the build."""
    from torch.utils import cpp_extension

    lock = folder / "lock"
    if not lock.exists():
        return False
    if not hasattr(cpp_extension, "FileLock"):  # torch <= 2.14
        return True
    try:
        with FileLock(str(lock), timeout=0):
            return False
    except Timeout:
        return True


@functools.cache
def load_cpu_kernel():
    """The kernel's `depth_mix` function, built (once per machine) and loaded (once per process)."""
    from torch.utils import cpp_extension

    folder = _build_folder()
    try:
        module = _load_built(folder)
        if module is None:
            folder.mkdir(parents=True, exist_ok=True)
            module = cpp_extension.load(name=folder.name, sources=[str(_SOURCE)], extra_cflags=_FLAGS,
                                        build_directory=str(folder))
    except Exception as err:  # no compiler, no ninja, an unwritable cache: say what is needed
        raise RuntimeError(
            f"depth_impl='cpu' compiles a C++ kernel on first use and could not: {err}. It needs a C++ compiler "
            "(g++ or clang++) and ninja (`pip install ninja`); or use depth_impl='auto', which needs neither."
        ) from err
    return module.depth_mix


def _needs_grad(query, candidates, score_bias) -> bool:
    return any(t.requires_grad for t in (query, score_bias, *(t for c in candidates for t in c)) if t is not None)


def depth_mix_cpu(
    query: torch.Tensor,
    state: DepthState,
    sources: list[DepthState],
    scaling: float,
    rule: str = "softmax",
    mix_states: str = "v",
    score_bias: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[DepthState, torch.Tensor | None]:
    """Same signature and results as `depthattn.ops.depth_mix_reference`; the kernel always returns the weights
    (they cost nothing extra there). Every state must share the query's dtype (as in the model)."""
    # kept lean: a decoding step calls this once per layer, and each Python step costs as much as the arithmetic
    candidates = [*sources, state]
    if query.device.type != "cpu" or rule == "linear" or (torch.is_grad_enabled()
                                                          and _needs_grad(query, candidates, score_bias)):
        return depth_mix_compiled(query, state, sources, scaling, rule, mix_states, score_bias, need_weights)
    mixed = [c.value for c in candidates] if mix_states == "v" else [c.key for c in candidates]
    if mix_states == "kv":
        mixed += [c.value for c in candidates]
    group = query.shape[1] // state.score_key.shape[1]
    out, weights = load_cpu_kernel()(query, [c.score_key for c in candidates], mixed, scaling / group, score_bias,
                                     rule == "uniform")
    key = out[0] if "k" in mix_states else state.key
    return DepthState(state.score_key, key, out[-1] if "v" in mix_states else state.value), weights
