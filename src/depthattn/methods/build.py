"""A config's method module, built (`build_method`), and a model's parameters counted (`count_parameters`)."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from transformers import PreTrainedModel

from . import METHODS
from .base import CrossLayerMethod


def build_method(config) -> CrossLayerMethod:
    """The module of `config.cross_layer`: its parameters (none for `vanilla` and `depth_attention`) and hooks.
    The config is checked again first: fields set after it was built skipped the constructor's checks."""
    config.validate()
    with torch.random.fork_rng(devices=[]):  # what an nn.Linear of the method draws is not the backbone's
        return METHODS[config.cross_layer](config)


def count_parameters(model: nn.Module) -> dict[str, int]:
    """`total`: distinct parameters (tied embeddings once); `extra_over_vanilla`: those of the cross-layer method;
    `non_embedding`: the total without the input embedding and the output head (the count scaling laws and
    "tokens per parameter" use in the field: Kaplan et al. 2020)."""
    method = cast(nn.Module | None, getattr(getattr(model, "model", model), "cross_layer", None))
    tables = {}
    if hasattr(model, "get_input_embeddings"):  # a transformers model: its input embedding and output head
        ends = cast(PreTrainedModel, model).get_input_embeddings(), cast(PreTrainedModel, model).get_output_embeddings()
        tables = {id(p): p.numel() for module in ends if module is not None for p in module.parameters()}
    total = sum(p.numel() for p in model.parameters())
    return {
        "total": total,
        "extra_over_vanilla": sum(p.numel() for p in method.parameters()) if method is not None else 0,
        "non_embedding": total - sum(tables.values()),
    }
