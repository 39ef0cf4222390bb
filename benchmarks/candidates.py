"""The models compared: transformers' Qwen3ForCausalLM and depthattn models on the same backbone weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from transformers import Cache, Qwen3Config, Qwen3ForCausalLM

import depthattn
from depthattn.convert import config_from_decoder
from depthattn.loading import parse_method_fields
from depthattn.methods import METHODS
from depthattn.presets import METHOD_PRESETS, method_settings

QWEN3 = "qwen3"
VANILLA = "vanilla"
# the value of a switchable field that computes the written-out form, against which the other forms are checked
REFERENCE = "reference"


def switched(method: str, method_fields: dict) -> dict:
    """The fields of `method_fields` (`--method-field NAME=VALUE`) that `method` switches."""
    return {name: value for name, value in method_fields.items() if name in METHODS[method].switchable_fields}


def all_candidates(method_fields: dict) -> list[str]:
    """qwen3, then every method of the config, each also at the reference form of its switchable field where it
    computes otherwise (the fast path, then the reference)."""
    names = [QWEN3]
    for name, method in METHODS.items():
        names.append(name)
        if len(method.switchable_fields) == 1:
            field = method.switchable_fields[0]
            value = method_fields.get(field, method.config_fields[field].default)
            if value != REFERENCE and REFERENCE in method.switch_values.get(field, ()):
                names.append(f"{name}:{REFERENCE}")
    return names


def parse_candidate(name: str, method_fields: dict) -> tuple[str, dict]:
    """'qwen3' | a method preset (every cross_layer method is one, under its name; depthattn.presets), optionally
    'PRESET:VALUE' for the value of its method's switchable field -> (preset, the switchable fields it computes with:
    VALUE's, else those of `method_fields` that its method switches)."""
    if name == QWEN3:
        return QWEN3, {}
    preset, _, value = name.partition(":")
    if preset not in METHOD_PRESETS:
        raise ValueError(f"unknown candidate {name!r}; choose among {QWEN3!r}, "
                         f"{', '.join(repr(m) for m in METHODS)} or another method preset (and 'PRESET:VALUE' for a "
                         "method with a switchable field: " + ", ".join(
                             f"{m} {c.switchable_fields[0]}" for m, c in METHODS.items()
                             if len(c.switchable_fields) == 1) + ")")
    method = METHOD_PRESETS[preset]["cross_layer"]
    fields = switched(method, method_fields)
    if value:
        switchable = METHODS[method].switchable_fields
        if len(switchable) != 1:
            raise ValueError(f"only a method with one switchable field takes a ':VALUE' suffix, got {name!r}")
        fields.update(parse_method_fields([f"{switchable[0]}={value}"]))  # its choices: checked as it is built
    return preset, fields


@dataclasses.dataclass
class Candidate:
    name: str
    model: torch.nn.Module
    method_fields: dict = dataclasses.field(default_factory=dict)  # the switchable fields it computes with
    optimizer: torch.optim.Optimizer | None = None
    decode_cache: Cache | None = None
    decode_token: torch.Tensor | None = None
    # the model, or (--compile) its torch.compile'd forms: one for training steps, one for decoding steps
    train_forward: Callable | None = None
    decode_forward: Callable | None = None


def qwen3_config(size: dict) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=size["vocab_size"], hidden_size=size["hidden_size"],
        intermediate_size=size["intermediate_size"], num_hidden_layers=size["num_hidden_layers"],
        num_attention_heads=size["num_attention_heads"], num_key_value_heads=size["num_key_value_heads"],
        head_dim=size["hidden_size"] // size["num_attention_heads"],
        max_position_embeddings=size["max_position_embeddings"], rope_theta=10000.0,
        tie_word_embeddings=False, attn_implementation="sdpa", use_cache=True,
    )


def build(names: list[str], size: dict, method_fields: dict, device: torch.device, dtype: torch.dtype,
          seed: int = 0, log: Callable[[str], None] = print) -> list[Candidate]:
    """Every candidate on one set of backbone weights (a transformers Qwen3 model, built once), shared in memory."""
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: a 1.5B model is slow to initialise on a CPU
        qwen3 = Qwen3ForCausalLM(qwen3_config(size)).to(dtype=dtype)
    weights = qwen3.state_dict()
    out = []
    for name in names:
        preset, fields = parse_candidate(name, method_fields)
        if preset == QWEN3:
            model = qwen3
        else:
            settings = method_settings(preset, size["num_hidden_layers"])
            config = config_from_decoder(qwen3.config, **{**settings, **fields})
            fields = {field: getattr(config, field) for field in METHODS[config.cross_layer].switchable_fields}
            config._attn_implementation = "sdpa"
            torch.manual_seed(seed + 1)  # a method's own parameters: the same initialisation in every run
            with torch.device(device):
                model = depthattn.DepthAttentionForCausalLM(config).to(dtype=dtype)
            # assign: every candidate reads the same backbone tensors, so no candidate gains or loses from
            # where in memory its weights happen to lie (decoding on a CPU is bound by reading them)
            missing, unexpected = model.load_state_dict(weights, strict=False, assign=True)
            if unexpected or any(not k.startswith("model.cross_layer.") for k in missing):
                raise RuntimeError(f"{name}: backbone weights do not match Qwen3's: missing {missing}, "
                                   f"unexpected {unexpected}")
        out.append(Candidate(name=name, model=model, method_fields=fields, train_forward=model,
                             decode_forward=model))
        params = sum(p.numel() for p in model.parameters()) / 1e6
        log(f"  built {name}: {params:.2f}M parameters" + "".join(f", {f}={v!r}" for f, v in fields.items()))
    return out
