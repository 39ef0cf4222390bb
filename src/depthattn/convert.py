"""Qwen3 checkpoints into Depth-Attention models: the same tensors under the same names, new settings."""

from __future__ import annotations

import os

from transformers import AutoConfig, PreTrainedConfig

from .config import DepthAttentionConfig

# Qwen3Config fields that carry over unchanged
QWEN3_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "initializer_range",
    "rms_norm_eps", "use_cache", "tie_word_embeddings", "rope_parameters", "attention_bias", "attention_dropout",
    "pad_token_id", "bos_token_id", "eos_token_id",
)


def config_from_qwen3(qwen3_config: PreTrainedConfig, **depth_settings) -> DepthAttentionConfig:
    if qwen3_config.model_type != "qwen3":
        raise ValueError(f"expected a Qwen3 config (model_type 'qwen3'), got model_type {qwen3_config.model_type!r}")
    if getattr(qwen3_config, "sliding_window", None) is not None:
        raise ValueError("Qwen3 checkpoints with use_sliding_window=True are not supported; only full attention is")
    fields = {name: getattr(qwen3_config, name) for name in QWEN3_FIELDS}
    fields["rope_parameters"] = dict(fields["rope_parameters"])
    return DepthAttentionConfig(**fields, **depth_settings)


def qwen3_to_depth_attention(model_class, model_or_path, **depth_settings):
    if isinstance(model_or_path, (str, os.PathLike)):
        if not os.path.isdir(model_or_path):
            raise FileNotFoundError(f"{model_or_path} is not a directory holding a Qwen3 checkpoint (config.json)")
        config = config_from_qwen3(AutoConfig.from_pretrained(model_or_path), **depth_settings)
        return model_class.from_pretrained(model_or_path, config=config)
    qwen3 = model_or_path
    config = config_from_qwen3(qwen3.config, **depth_settings)
    model = model_class(config).to(device=qwen3.device, dtype=qwen3.dtype)
    result = model.load_state_dict(qwen3.state_dict(), strict=False)
    # a baseline's own parameters (model.cross_layer.*) keep their initialisation; every Qwen3 tensor is used
    missing = [k for k in result.missing_keys if not k.startswith("model.cross_layer.")]
    if missing or result.unexpected_keys:
        raise ValueError(f"the Qwen3 model does not match: missing {missing}, unexpected {result.unexpected_keys}")
    return model.train(qwen3.training)
