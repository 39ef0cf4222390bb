"""The shims of depthattn/compat.py that `import depthattn` needs (the config's, and the transformers package module
it finds), apart so that it does not import transformers' modeling code, as compat.py does."""

from __future__ import annotations

import transformers
from transformers import GenerationConfig
from transformers.modeling_outputs import BaseModelOutputWithPast

# The `transformers` package module as `import depthattn` finds it, which the modules imported so far hold; importing
# transformers.processing_utils replaces it in sys.modules (compat.register_for_transformers_serve).
TRANSFORMERS_AS_IMPORTED = transformers


def config_generation_keys() -> set[str]:
    """The generation settings that model configs used to carry (now in generation_config.json), which transformers
    still accepts in a model config; no public list exists."""
    return set(GenerationConfig._get_default_generation_params())


# The KV cache's name in model outputs, in the keyword `generate` passes to `forward` and in the masking functions'
# parameter: `cache`, before 5.24 `past_key_values`.
CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
