"""Depth mixing (docs/method.md#the-operation), one operation with interchangeable implementations.

All share the signature and results of the reference `depth_mix_reference` (`naive.py`):

    depth_mix(query, state, sources, scaling, rule="softmax", mix_states="v", score_bias=None,
              need_weights=True) -> (DepthState, weights)

`need_weights=False` lets a path skip computing the weights (it returns None then), as generation does.
Rules: `"softmax"` over depth scores (plus `score_bias`), `"uniform"` (the softmax of `score_bias` when given, else
the plain average) and `"linear"` (the weights are `score_bias` itself, not normalised; the C++ kernel hands this
rule to the compiled form, and the Triton kernels take no `score_bias`).

* `"reference"`: the plain reference (`naive.py`).
* `"compiled"`: a few plain torch ops (`compiled.py`), fast in eager mode and fused by `torch.compile`
  (no graph break with `fullgraph=True`).
* `"triton"`: Triton kernels, forward and backward (`triton.py`); GPUs (or `TRITON_INTERPRET=1`).
* `"cpu"`: one C++ op per call for CPU inference (`cpu.py`), compiled on first use (needs a C++ compiler and
  ninja); calls that need gradients take the compiled form. The fastest eager CPU decoding.
* `"auto"`: `"triton"` on a GPU where Triton is installed, outside `torch.compile`, for more than `SMALL_ROWS`
  rows (training, prefill), else `"compiled"`: at a decoding step's few rows the time is the host's, and the
  compiled form's few torch ops cost less of it than a Triton call with its pointer tables (measured on an
  H200: benchmarks/results/h200-1.5b-decode-impls.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from depthattn.layer_states import DepthState

from .compiled import SMALL_ROWS, depth_mix_compiled
from .cpu import depth_mix_cpu, load_cpu_kernel
from .naive import depth_mix_reference
from .triton import TRITON_AVAILABLE, depth_mix_triton, triton_runs_on


def depth_mix_auto(
    query: torch.Tensor,
    state: DepthState,
    sources: list[DepthState],
    scaling: float,
    rule: str = "softmax",
    mix_states: str = "v",
    score_bias: torch.Tensor | None = None,
    need_weights: bool = True,
) -> tuple[DepthState, torch.Tensor | None]:
    """The fastest implementation for these tensors: Triton on a GPU for many rows (eager, no score bias), else the
    compiled form."""
    if takes_triton(query, state, score_bias):
        return depth_mix_triton(query, state, sources, scaling, rule, mix_states)
    return depth_mix_compiled(query, state, sources, scaling, rule, mix_states, score_bias, need_weights)


def takes_triton(query: torch.Tensor, state: DepthState, score_bias: torch.Tensor | None = None) -> bool:
    """Whether `"auto"` runs these tensors through the Triton kernels."""
    rows = query.shape[0] * state.score_key.shape[1] * query.shape[2]  # B * Hkv * T
    return (TRITON_AVAILABLE and score_bias is None and query.device.type != "cpu" and rows > SMALL_ROWS
            and not torch.compiler.is_compiling() and triton_runs_on(query.device))


_IMPLS: dict[str, Callable] = {
    "auto": depth_mix_auto,
    "reference": depth_mix_reference,
    "compiled": depth_mix_compiled,
    "triton": depth_mix_triton,
    "cpu": depth_mix_cpu,
}
DEPTH_IMPLS = tuple(_IMPLS)  # the values of DepthAttentionConfig.depth_impl


def get_depth_mix(impl: str = "auto") -> Callable:
    """The depth-mixing function named `impl` (one of DEPTH_IMPLS); `"cpu"` builds its kernel now, so that a
    missing compiler shows when the model is built rather than mid-generation."""
    try:
        fn = _IMPLS[impl]
    except KeyError:
        raise ValueError(f"depth_impl (the depth mixing implementation) must be one of "
                         f"{', '.join(map(repr, DEPTH_IMPLS))}; got {impl!r}") from None
    if impl == "cpu":
        load_cpu_kernel()
    return fn


def depth_mix(query, state, sources, scaling, rule="softmax", mix_states="v", score_bias=None, need_weights=True,
              impl: str = "auto"):
    """Depth mixing through the implementation `impl` (one of DEPTH_IMPLS)."""
    return get_depth_mix(impl)(query, state, sources, scaling, rule, mix_states, score_bias, need_weights)


__all__ = [
    "DEPTH_IMPLS",
    "TRITON_AVAILABLE",
    "depth_mix",
    "depth_mix_auto",
    "depth_mix_compiled",
    "depth_mix_cpu",
    "depth_mix_reference",
    "depth_mix_triton",
    "get_depth_mix",
    "triton_runs_on",
]
