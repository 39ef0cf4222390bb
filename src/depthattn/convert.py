"""Decoder checkpoints into Depth-Attention models: the same tensors under the same names, new settings.

Sources: transformers' Llama, Mistral, Qwen2 and Qwen3 causal LMs (a model or a local folder), folders of the
Depth-Attention reference implementation (docs/method.md#the-reference-implementations-checkpoints) and this
project's own models (another cross-layer method on the same backbone: retrofitting, docs/method.md#retrofitting).
The backbone switches of `DepthAttentionConfig` reproduce each one exactly; every source tensor is used as it is.
`depthattn convert SRC_DIR OUT_DIR` writes a converted folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers import AutoConfig, PreTrainedConfig
from transformers.utils import logging as transformers_logging

from .checkpoint_shapes import (
    CONFIG_FIX,
    check_layers,
    check_shapes,
    first_line,
    meta_shapes,
    saved_shapes,
    tensor_shapes,
)
from .checksums import check_checksums
from .config import DepthAttentionConfig
from .files import read_json_object

FAMILIES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "depth_attention": "DepthAttentionForCausalLM"}

# config fields that every family has, with the same meaning as ours
SHARED_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
    "use_cache", "tie_word_embeddings", "rope_parameters", "attention_dropout", "pad_token_id", "bos_token_id",
    "eos_token_id",
)

# the reference implementation's config keys, on top of Llama's
# (docs/method.md#the-reference-implementations-checkpoints)
REFERENCE_KEYS = (
    "use_depth_attention", "depth_attention_stride", "depth_attention_recent_window", "use_qk_norm",
    "cross_layer_pattern", "cross_layer_mode", "depth_softmax_stride", "depth_recent_window", "recurrent_model",
    "scale_embeds", "no_residual", "layer_kv_reuse_map",
)
REFERENCE_DEPTH_NAMES = ("depth_attention", "depth_softmax")  # cross_layer_pattern / cross_layer_mode values
# a tensor the reference model creates and saves but never uses in its forward
REFERENCE_UNUSED = {"lm_head_layernorm.weight"}

TOKENIZER_FILES = {"special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
                   "chat_template.jinja", "chat_template.json"}

def is_reference_config(source: PreTrainedConfig) -> bool:
    return source.model_type == "llama" and any(hasattr(source, key) for key in REFERENCE_KEYS)


def backbone_settings(source: PreTrainedConfig) -> dict:
    """The `DepthAttentionConfig` fields that give `source`'s decoder, tensor for tensor."""
    family = source.model_type
    if family == "depth_attention":
        return source.backbone_settings()
    fields = {name: getattr(source, name) for name in SHARED_FIELDS}
    fields["rope_parameters"] = dict(fields["rope_parameters"])
    fields["head_dim"] = getattr(source, "head_dim", None) or source.hidden_size // source.num_attention_heads
    fields["use_qk_norm"] = family == "qwen3"
    if family in ("llama", "qwen3"):
        fields["attention_bias"] = source.attention_bias
    if family == "llama":
        fields["mlp_bias"] = source.mlp_bias
    if family == "qwen2":
        fields["qkv_bias"] = True  # Qwen2Attention: q, k, v biases always, no o bias
    window = getattr(source, "sliding_window", None)  # Qwen2 and Qwen3 clear it unless use_sliding_window
    if family in ("mistral", "qwen2", "qwen3") and window is not None:
        fields.update(use_sliding_window=True, sliding_window=window,
                      max_window_layers=getattr(source, "max_window_layers", 0))
    return fields


def reference_settings(source: PreTrainedConfig) -> dict:
    """Backbone and method fields of a reference-implementation config, after refusing what has no equivalent."""
    for key, plain in (("scale_embeds", False), ("no_residual", False), ("layer_kv_reuse_map", None)):
        if getattr(source, key, plain) not in (plain, False, None, {}, []):
            raise ValueError(f"{key}={getattr(source, key)!r}: this reference-implementation option has no "
                             "equivalent here; only checkpoints with it off convert")
    named = [getattr(source, key, None) for key in ("cross_layer_pattern", "cross_layer_mode")]
    other = [name for name in named if name not in (None, "residual", *REFERENCE_DEPTH_NAMES)]
    if other:
        raise ValueError(f"cross-layer mode {other[0]!r} of the reference implementation does not convert; only "
                         "Depth-Attention (use_depth_attention, or cross_layer_mode 'depth_softmax') and vanilla do")
    depth = bool(getattr(source, "use_depth_attention", False)) or any(n in REFERENCE_DEPTH_NAMES for n in named)
    stride = getattr(source, "depth_attention_stride", getattr(source, "depth_softmax_stride", 1))
    window = getattr(source, "depth_attention_recent_window", getattr(source, "depth_recent_window", 0))
    return {
        "use_qk_norm": bool(getattr(source, "use_qk_norm", True)),  # the reference's default is on
        "k_norm_after_rope": True,
        "cross_layer": "depth_attention" if depth else "vanilla",
        "depth_stride": max(1, int(stride)),  # its stride <= 1 means every earlier layer, as ours of 1
        "depth_window": max(0, int(window)),
    }


def check_family(model_type, families=tuple(FAMILIES)) -> None:
    if model_type not in families:
        supported = ", ".join(FAMILIES[f] for f in families) + (
            " and Depth-Attention reference-implementation folders" if "llama" in families else "")
        raise ValueError(f"cannot convert model_type {model_type!r}; supported: {supported}")


def config_from_decoder(source: PreTrainedConfig, families=tuple(FAMILIES), **depth_settings) -> DepthAttentionConfig:
    """The config of `source`'s decoder with Depth-Attention settings: a reference-implementation folder's own,
    else ours (DepthAttentionConfig's defaults), then `depth_settings` over either."""
    check_family(source.model_type, families)
    fields = backbone_settings(source)
    if is_reference_config(source):
        fields.update(reference_settings(source))
    source_types = getattr(source, "layer_types", None)
    if source_types is not None and list(source_types) != DepthAttentionConfig(**fields).layer_types:
        raise ValueError(f"layer_types {list(source_types)} do not follow from use_sliding_window, sliding_window "
                         "and max_window_layers; only such layouts convert")
    return DepthAttentionConfig(**{**fields, **depth_settings})


def decoder_to_depth_attention(model_class, model_or_dir, families=tuple(FAMILIES), **depth_settings):
    """`model_class` (DepthAttentionForCausalLM) with every tensor of a decoder model or saved folder."""
    if isinstance(model_or_dir, (str, os.PathLike)):
        return _from_folder(model_class, Path(model_or_dir), families, depth_settings)
    source_model = model_or_dir
    config = config_from_decoder(source_model.config, families, **depth_settings)
    model = model_class(config).to(device=source_model.device, dtype=source_model.dtype)
    saved = {name: tuple(tensor.shape) for name, tensor in source_model.state_dict().items()}
    check_method_tensors(type(source_model).__name__, source_model.config, saved, tensor_shapes(model))
    check_shapes(saved, tensor_shapes(model), source_model.config, "its config")
    result = model.load_state_dict(source_model.state_dict(), strict=False)
    _check_tensors(type(source_model).__name__, result.missing_keys, result.unexpected_keys)
    return model.train(source_model.training)


def _from_folder(model_class, folder: Path, families, depth_settings):
    source = read_decoder_config(folder, families)
    config = config_from_decoder(source, families, **depth_settings)
    saved, needed = saved_shapes(folder), meta_shapes(model_class, config)
    if saved is not None:  # safetensors: checked before anything is loaded
        check_layers(saved, source, f"{folder / 'config.json'}")
        check_method_tensors(folder, source, saved, needed)
        check_shapes(saved, needed, source, f"{folder / 'config.json'}")
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # its load report ("can be ignored"): the checks below decide
    try:
        model, info = model_class.from_pretrained(folder, config=config, local_files_only=True, use_kernels=False,
                                                  output_loading_info=True, ignore_mismatched_sizes=True)
    finally:
        transformers_logging.set_verbosity(verbosity)
    mismatched = {key: tuple(s) for key, s, _ in info["mismatched_keys"]}
    check_method_tensors(folder, source, {**mismatched, **dict.fromkeys(info["unexpected_keys"], ())}, needed)
    check_shapes(mismatched,
                 {key: tuple(n) for key, _, n in info["mismatched_keys"]}, source, f"{folder / 'config.json'}")
    unused = REFERENCE_UNUSED if is_reference_config(source) else set()
    _check_tensors(folder, info["missing_keys"], set(info["unexpected_keys"]) - unused)
    return model


def read_decoder_config(folder: Path, families=tuple(FAMILIES)) -> PreTrainedConfig:
    """The config of the model saved in `folder`, with a one-line error for a missing folder or a config.json that
    is missing, empty, not JSON or not a supported family's."""
    if not folder.is_dir():
        what = "a file" if folder.exists() else "not a directory: it does not exist"
        raise FileNotFoundError(f"{folder} is {what}; pass the folder of a saved model (config.json and "
                                "model.safetensors)")
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a directory holding a saved model (config.json); pass the folder "
                                "of a saved model")
    model_type = read_json_object(path).get("model_type")
    if model_type is None:
        raise ValueError(f"{path} names no model_type; add it (llama, mistral, qwen2 or qwen3) or restore the "
                         "original file")
    check_family(model_type, families)
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{path} is not a valid {model_type} config ({first_line(error)}); "
                         f"{CONFIG_FIX}") from None


def _check_tensors(source, missing, unexpected):
    """Every source tensor used and every model tensor given, except the new ones of the cross-layer methods
    (`model.cross_layer.*`), which keep their initialisation."""
    missing = [k for k in missing if not is_method_tensor(k)]
    if missing or unexpected:
        raise ValueError(f"the tensors of {source} do not match its config: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")


def check_method_tensors(source, source_config, saved: dict, needed: dict) -> None:
    """A saved method's own tensors (`model.cross_layer.*`: trained, unlike a new method's) go into a model of the
    same method and shapes only; dropped, their trained values would be lost, and they are no config's fault."""
    lost = sorted(name for name, shape in saved.items() if is_method_tensor(name) and needed.get(name) != shape)
    if lost:
        more = f" and {len(lost) - 1} more" if len(lost) > 1 else ""
        raise ValueError(f"{source} holds trained tensors of its method (cross_layer="
                         f"{getattr(source_config, 'cross_layer', '?')!r}: {lost[0]}{more}) that the settings asked "
                         "for have not, or shape otherwise, so their values would be lost: keep that method and its "
                         "settings, or start from a model whose method has no tensors of its own (vanilla, for one)")


def is_method_tensor(name: str) -> bool:
    """A tensor of a cross-layer method (`model.cross_layer.*`), not of the backbone."""
    return name.startswith("model.cross_layer.")


def load_backbone(model, folder):
    """Start `model` from the model saved in `folder` (retrofitting, docs/method.md#retrofitting): every saved
    tensor as it is, while the tensors of `model`'s method keep their initialisation. The saved backbone must be
    `model`'s; its method may be another without tensors of its own (vanilla, typically)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model.init_from: {folder} holds no saved model (config.json); train that model "
                                "first or correct the path")
    check_checksums(folder, "model.init_from: ")
    source = decoder_to_depth_attention(type(model), folder, **model.config.cross_layer_settings())
    ours, theirs = model.config.backbone_settings(), source.config.backbone_settings()
    differ = [f"{name} is {theirs[name]!r} there, {ours[name]!r} here" for name in ours if ours[name] != theirs[name]]
    if differ:
        raise ValueError(f"model.init_from: {folder} holds another backbone than this run's ({'; '.join(differ)}); "
                         "give the run the saved model's settings (model.preset, model.overrides, "
                         "model.max_position_embeddings, the same data)")
    saved = {name: tensor for name, tensor in source.state_dict().items() if not is_method_tensor(name)}
    model.load_state_dict(saved, strict=False)
