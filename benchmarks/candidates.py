"""The models compared: transformers' Qwen3ForCausalLM and depthattn models on the same backbone weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from transformers import Cache, Qwen3Config, Qwen3ForCausalLM

import depthattn
from depthattn.convert import config_from_decoder
from depthattn.methods import METHODS
from depthattn.ops import DEPTH_IMPLS

QWEN3 = "qwen3"
VANILLA = "vanilla"


def all_candidates(depth_impl: str) -> list[str]:
    """qwen3, vanilla, Depth-Attention (fast path, then the reference), then every other method of the config."""
    names = [QWEN3, VANILLA, "depth_attention"]
    if depth_impl != "reference":
        names.append("depth_attention:reference")
    names += [m for m in METHODS if m not in (VANILLA, "depth_attention")]
    return names


def parse_candidate(name: str, depth_impl: str) -> tuple[str, str | None]:
    """'qwen3' | 'vanilla' | a cross_layer method, optionally 'depth_attention:IMPL' -> (method, depth impl)."""
    if name == QWEN3:
        return QWEN3, None
    method, _, impl = name.partition(":")
    if method not in METHODS:
        raise ValueError(f"unknown candidate {name!r}; choose among {QWEN3!r}, "
                         f"{', '.join(repr(m) for m in METHODS)} "
                         "(and 'depth_attention:IMPL' with IMPL in " + ", ".join(DEPTH_IMPLS) + ")")
    if impl and method != "depth_attention":
        raise ValueError(f"only depth_attention takes an implementation suffix, got {name!r}")
    if impl and impl not in DEPTH_IMPLS:
        raise ValueError(f"unknown depth implementation {impl!r} in {name!r}; choose among {DEPTH_IMPLS}")
    return method, (impl or depth_impl) if method == "depth_attention" else None


@dataclasses.dataclass
class Candidate:
    name: str
    model: torch.nn.Module
    depth_impl: str | None = None  # for Depth-Attention: which depth_mix implementation runs
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


def build(names: list[str], size: dict, depth_impl: str, device: torch.device, dtype: torch.dtype,
          seed: int = 0, log: Callable[[str], None] = print) -> list[Candidate]:
    """Every candidate on one set of backbone weights (a transformers Qwen3 model, built once), shared in memory."""
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: a 1.5B model is slow to initialise on a CPU
        qwen3 = Qwen3ForCausalLM(qwen3_config(size)).to(dtype=dtype)
    weights = qwen3.state_dict()
    out = []
    for name in names:
        method, impl = parse_candidate(name, depth_impl)
        if method == QWEN3:
            model = qwen3
        else:
            settings = dict(cross_layer=method)
            if impl is not None:
                settings["depth_impl"] = impl
            config = config_from_decoder(qwen3.config, **settings)
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
        out.append(Candidate(name=name, model=model, depth_impl=impl, train_forward=model,
                             decode_forward=model))
        params = sum(p.numel() for p in model.parameters()) / 1e6
        log(f"  built {name}: {params:.2f}M parameters" + (f", depth_mix implementation {impl!r}" if impl else ""))
    return out
