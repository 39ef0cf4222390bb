"""depthattn: language models with Depth-Attention (cross-layer value mixing inside attention)."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .compat import register_for_transformers_serve
from .config import DepthAttentionConfig
from .depth import DepthState, depth_sources
from .methods import count_parameters
from .modeling import DepthAttentionForCausalLM, DepthAttentionModel, DepthAttentionPreTrainedModel
from .ops import depth_mix
from .presets import METHOD_PRESETS, method_settings

__version__ = "0.1.0"

AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)
AutoModel.register(DepthAttentionConfig, DepthAttentionModel, exist_ok=True)
AutoModelForCausalLM.register(DepthAttentionConfig, DepthAttentionForCausalLM, exist_ok=True)
register_for_transformers_serve(DepthAttentionForCausalLM)  # `transformers serve` finds it by name

__all__ = [
    "DepthAttentionConfig",
    "DepthAttentionForCausalLM",
    "DepthAttentionModel",
    "DepthAttentionPreTrainedModel",
    "DepthState",
    "METHOD_PRESETS",
    "count_parameters",
    "depth_mix",
    "depth_sources",
    "method_settings",
]
