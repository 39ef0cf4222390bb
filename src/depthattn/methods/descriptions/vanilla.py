"""The vanilla decoder, `cross_layer="vanilla"`: Qwen3 (Qwen Team, arXiv 2505.09388) as it is, the reference every
method's costs are counted against.

Parameters: none beyond the backbone. Initialisation: the backbone's. Inference state: the KV cache only.
"""

from __future__ import annotations

from .base import MethodDescription, NoExtraCost


class VanillaDescription(NoExtraCost, MethodDescription):
    module = "depthattn.methods.vanilla:Vanilla"
    inference_state = "Across tokens: none (the KV cache only). Per token while it is processed: none."
    reentrant_checkpointing_safe = True
