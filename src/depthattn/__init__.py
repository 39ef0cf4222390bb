"""depthattn: language models with Depth-Attention (cross-layer value mixing inside attention).

`import depthattn` registers the config with `AutoConfig` and stays light (no transformers modeling code): the names
below load at first use, and the first config imports `depthattn.modeling`, which registers the models with
`AutoModel` and `AutoModelForCausalLM` (`config.register_models`)."""

import importlib

from transformers import AutoConfig

from .config import DepthAttentionConfig

__version__ = "0.1.0"

AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)

_LAZY = {  # public name: the module that defines it, imported at its first use
    "DepthAttentionForCausalLM": "modeling",
    "DepthAttentionModel": "modeling",
    "DepthAttentionPreTrainedModel": "modeling",
    "DepthState": "depth",
    "depth_sources": "depth",
    "count_parameters": "methods",
    "depth_mix": "ops",
    "METHOD_PRESETS": "presets",
    "method_settings": "presets",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["DepthAttentionConfig", *sorted(_LAZY)]
