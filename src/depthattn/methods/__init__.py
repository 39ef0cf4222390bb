"""Cross-layer methods behind `DepthAttentionConfig.cross_layer`: one small module each, one shared backbone.

Depth-Attention itself lives in `depthattn.depth` (no parameters). The baselines (docs/method.md#baselines):

- hidden-state methods (a `Residual`: how sublayer outputs are combined into the stream):
  `denseformer`, `attnres`, `mhc`, `hyper_connections`;
- inside attention, cache-free like Depth-Attention: `value_residual`.

Their parameters live under `DepthAttentionModel.cross_layer`; vanilla and Depth-Attention models have none.
"""

from __future__ import annotations

from torch import nn

from .attnres import AttnRes
from .base import CrossLayerMethod, Residual
from .denseformer import DenseFormer
from .hyper_connections import HyperConnections
from .mhc import MHC
from .value_residual import ValueResidual

METHODS: dict[str, type[CrossLayerMethod]] = {
    "value_residual": ValueResidual,
    "denseformer": DenseFormer,
    "attnres": AttnRes,
    "mhc": MHC,
    "hyper_connections": HyperConnections,
}

# The extra state each `cross_layer` holds at inference, over a vanilla decoder.
INFERENCE_STATE: dict[str, str] = {
    "none": "none",
    "depth_attention": (
        "Across tokens: none; the KV cache has vanilla's size (mixed values in the value slots). Per token while "
        "it is processed: k and mixed v of its source layers (|S| KV-head vector pairs)."
    ),
    **{name: cls.inference_state for name, cls in METHODS.items()},
}


def build_method(config) -> CrossLayerMethod | None:
    """The module holding the method's parameters, or None for `none` and `depth_attention`."""
    cls = METHODS.get(config.cross_layer)
    return cls(config) if cls is not None else None


def count_parameters(model: nn.Module) -> dict[str, int]:
    """`total`: distinct parameters (tied embeddings once); `extra_over_vanilla`: those of the cross-layer method
    and Depth-Attention's optional score biases."""
    base = getattr(model, "model", model)
    method = getattr(base, "cross_layer", None)
    extra = sum(p.numel() for name, p in base.named_parameters() if "depth_score_bias" in name)
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "extra_over_vanilla": extra + (sum(p.numel() for p in method.parameters()) if method is not None else 0),
    }


__all__ = [
    "AttnRes", "CrossLayerMethod", "DenseFormer", "HyperConnections", "INFERENCE_STATE", "METHODS", "MHC",
    "Residual", "ValueResidual", "build_method", "count_parameters",
]
