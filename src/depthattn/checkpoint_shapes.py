"""Checks of a saved model folder's tensor shapes against a config, from the safetensors headers (nothing loaded):
which files hold the weights, every tensor's shape, and a one-line error naming the first tensor that does not fit,
both shapes and the config fields behind them. Conversion (convert.py), loading (loading.py) and
`depthattn checksums` check folders with them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from .files import read_json_object

# the config fields behind each dimension of a decoder's tensors, by how the tensor's name ends (q_norm before norm)
_Q, _KV, _HIDDEN, _MLP = ("num_attention_heads", "head_dim"), ("num_key_value_heads", "head_dim"), \
    ("hidden_size",), ("intermediate_size",)
SHAPE_FIELDS = {
    "embed_tokens.weight": (("vocab_size",), _HIDDEN), "lm_head.weight": (("vocab_size",), _HIDDEN),
    "q_proj.weight": (_Q, _HIDDEN), "k_proj.weight": (_KV, _HIDDEN), "v_proj.weight": (_KV, _HIDDEN),
    "o_proj.weight": (_HIDDEN, _Q), "q_proj.bias": (_Q,), "k_proj.bias": (_KV,), "v_proj.bias": (_KV,),
    "o_proj.bias": (_HIDDEN,), "gate_proj.weight": (_MLP, _HIDDEN), "up_proj.weight": (_MLP, _HIDDEN),
    "down_proj.weight": (_HIDDEN, _MLP), "gate_proj.bias": (_MLP,), "up_proj.bias": (_MLP,),
    "down_proj.bias": (_HIDDEN,), "q_norm.weight": (("head_dim",),), "k_norm.weight": (("head_dim",),),
    "norm.weight": (_HIDDEN,),
}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
CONFIG_FIX = "fix config.json (hidden_size, num_attention_heads, head_dim, ...)"
WEIGHTS_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (its type's name when it has none), for a one-line error."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def weights_files(folder: Path) -> list[Path]:
    """The files holding the weights of the model saved in `folder` (one, or the shards an index names)."""
    present = [name for name in WEIGHTS_NAMES if (folder / name).is_file()]
    if not present:
        raise FileNotFoundError(f"{folder} holds no weights ({', '.join(WEIGHTS_NAMES[:3])}); copy the model's "
                                "weights files into it")
    name = present[0]
    if not name.endswith(".index.json"):
        return [folder / name]
    weight_map = read_json_object(folder / name).get("weight_map")
    if not isinstance(weight_map, dict):
        raise ValueError(f"{folder / name} has no weight_map; restore the original file")
    shards = [folder / shard for shard in sorted(set(map(str, weight_map.values())))]
    missing = [shard.name for shard in shards if not shard.is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}, named in {name}; copy the missing shards "
                                "into it")
    return shards


def saved_shapes(folder: str | os.PathLike) -> dict[str, tuple[int, ...]] | None:
    """Name -> shape of every tensor saved in `folder`, from the safetensors headers (nothing is loaded); None for
    weights in another format. A missing, truncated or garbled file is a one-line error naming it."""
    files = weights_files(Path(folder))
    if any(file.suffix != ".safetensors" for file in files):
        return None
    shapes = {}
    for file in files:
        try:
            with safe_open(file, framework="pt") as weights:
                shapes.update({name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()})  # noqa: SIM118  (safe_open: keys(), no __iter__)
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file} is not a readable safetensors file ({first_line(error)}): it is damaged or "
                             "cut short; copy it again") from None
    return shapes


def tensor_shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def meta_shapes(model_class, config) -> dict[str, tuple[int, ...]]:
    """tensor_shapes of `model_class(config)`, built on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        return tensor_shapes(model_class(config))


def check_layers(saved: dict, config, config_name: str) -> None:
    """A one-line error when the weights hold another number of layers than the config's num_hidden_layers."""
    layers = {int(match.group(1)) for name in saved if (match := _LAYER.match(name))}
    if layers and len(layers) != config.num_hidden_layers:
        raise ValueError(f"the checkpoint holds {len(layers)} layers but {config_name} has num_hidden_layers="
                         f"{config.num_hidden_layers}: the config does not describe these weights; fix config.json "
                         "(num_hidden_layers)")


def check_shapes(saved: dict, needed: dict, config, config_name: str) -> None:
    """A one-line error naming the first tensor whose saved shape differs from the one `config` gives, both shapes
    and the config fields behind the dimensions that differ."""
    wrong = [name for name in needed if name in saved and tuple(saved[name]) != tuple(needed[name])]
    if not wrong:
        return
    name = wrong[0]
    fields = ", ".join(f"{field}={config_value(config, field)}" for field in
                       fields_behind(name, saved[name], needed[name]))
    more = f" ({len(wrong) - 1} more tensors differ too)" if len(wrong) > 1 else ""
    raise ValueError(f"{name} has shape {tuple(saved[name])} in the checkpoint but {tuple(needed[name])} from "
                     f"{config_name}{' ' + fields if fields else ''}{more}: the config does not describe these "
                     f"weights; {CONFIG_FIX}")


def fields_behind(name: str, saved, needed) -> list[str]:
    """The config fields that give the dimensions of tensor `name` where `saved` and `needed` differ (all of them
    when the number of dimensions differs); empty for a tensor of unknown role."""
    dims = next((dims for ending, dims in SHAPE_FIELDS.items() if name.endswith(ending)), ())
    differ = [fields for dim, fields in enumerate(dims) if len(saved) == len(needed) == len(dims)
              and saved[dim] != needed[dim]] or dims
    return list(dict.fromkeys(field for fields in differ for field in fields))


def config_value(config, field: str):
    value = getattr(config, field, None)
    if value is None and field == "head_dim":
        return config.hidden_size // config.num_attention_heads
    return value
