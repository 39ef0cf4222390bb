"""Fast paths beside their plain references, each tested against the reference (tests/ops)."""

from .depth_mix import (
    DEPTH_IMPLS,
    TRITON_AVAILABLE,
    depth_mix,
    depth_mix_auto,
    depth_mix_compiled,
    depth_mix_reference,
    depth_mix_triton,
    get_depth_mix,
    triton_runs_on,
)

__all__ = [
    "DEPTH_IMPLS",
    "TRITON_AVAILABLE",
    "depth_mix",
    "depth_mix_auto",
    "depth_mix_compiled",
    "depth_mix_reference",
    "depth_mix_triton",
    "get_depth_mix",
    "triton_runs_on",
]
