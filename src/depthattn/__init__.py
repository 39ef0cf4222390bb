"""depthattn: language models with Depth-Attention (cross-layer value mixing inside attention)."""

import sys

import transformers.processing_utils  # noqa: F401 (see the registration below)
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

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
# transformers' server (`transformers serve`, cli/serving/model_manager.py) finds a checkpoint's class by its name in
# config.json `architectures`, as an attribute of the transformers package. Importing transformers.processing_utils
# replaces that package module in sys.modules (direct_transformers_import), hence that import above: the class is
# set on the module that stays.
setattr(sys.modules["transformers"], DepthAttentionForCausalLM.__name__, DepthAttentionForCausalLM)

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
