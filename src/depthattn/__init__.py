"""depthattn: language models with Depth-Attention (cross-layer value mixing inside attention).

`import depthattn` registers the config with `AutoConfig` and stays light (no transformers modeling code): the names
below load at first use, and the first config imports `depthattn.modeling`, which registers the models with
`AutoModel` and `AutoModelForCausalLM` (`config.register_models`)."""

from transformers import AutoConfig

from .config import DepthAttentionConfig
from .lazy import lazy_names

__version__ = "0.1.0"

AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)

_LAZY = {  # public name: the module that defines it, imported at its first use
    "DepthAttentionForCausalLM": "modeling",
    "DepthAttentionModel": "modeling",
    "DepthAttentionPreTrainedModel": "modeling",
    "DepthState": "layer_states",
    "depth_sources": "methods.depth_attention",
    "count_parameters": "methods",
    "depth_mix": "ops",
    "METHOD_PRESETS": "presets",
    "method_settings": "presets",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
__all__ = ["DepthAttentionConfig", *sorted(_LAZY)]
