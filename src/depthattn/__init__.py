"""depthattn: language models with Depth-Attention (cross-layer value mixing inside attention).

`import depthattn` registers the config with `AutoConfig` and stays light (no transformers modeling code): the names
below load at first use, and the first config imports `depthattn.modeling`, which registers the models with
`AutoModel` and `AutoModelForCausalLM` (`config.BEFORE_EACH_CONFIG`)."""

from transformers import AutoConfig

from .config import BEFORE_EACH_CONFIG, DepthAttentionConfig
from .lazy import lazy_names

__version__ = "0.1.0"

AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)


def _register_models():
    """depthattn.modeling registers the model classes with transformers' Auto classes as it is imported."""
    from . import modeling  # noqa: F401  (here: it imports the config, and `import depthattn` stays light)


BEFORE_EACH_CONFIG.append(_register_models)

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
