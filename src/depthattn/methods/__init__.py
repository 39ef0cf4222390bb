"""Cross-layer methods behind `DepthAttentionConfig.cross_layer`: one small module each, one shared backbone,
one registry (`METHODS`, filled by `register`) that the config, the model, the costs and the inference-state table
read.

- `vanilla`: the plain decoder (neither family below); `depth_attention`: Depth-Attention (an `AttentionMixer`; its
  mixing: `depthattn.ops`; the states it mixes: `depthattn.layer_states`);
- hidden-state baselines (a `Residual`: how sublayer outputs are combined into the stream):
  `denseformer`, `attnres`, `mhc`, `hyper_connections` (docs/method.md#baselines);
- hidden-state relatives adopted since the paper: `mudd` (MUDDFormer);
- inside attention (an `AttentionMixer`), cache-free like Depth-Attention: `value_residual`, `value_embeddings`;
  `moda` (Mixture-of-Depths Attention: earlier layers' keys and values of the same token join the attention's
  softmax).

Their parameters live under `DepthAttentionModel.cross_layer`; vanilla and Depth-Attention models have none.
A method from another package registers itself through an entry point of the group `depthattn.methods`, loaded as
this module is imported, so that every process (commands, pool workers, Slurm jobs, `AutoModel` after
`import depthattn`) knows it (docs/methods.md).
"""

from __future__ import annotations

import importlib.metadata

import torch
from torch import nn

from ..config import ENTRY_POINT_GROUP, METHODS, DepthAttentionConfig
from .attnres import AttnRes
from .base import (
    COST_MEMBERS,
    AttentionMixer,
    CrossLayerMethod,
    FlopTerm,
    NoExtraCost,
    Residual,
    overrides_attention,
    undeclared_costs,
)
from .denseformer import DenseFormer
from .depth_attention import DepthAttention
from .hyper_connections import HyperConnections
from .mhc import MHC
from .moda import MoDA
from .mudd import MUDD
from .value_embeddings import ValueEmbeddings
from .value_residual import ValueResidual
from .vanilla import Vanilla

# The extra state each `cross_layer` holds at inference, over a vanilla decoder.
INFERENCE_STATE: dict[str, str] = {}


def register(name: str, cls: type[CrossLayerMethod]):
    """Make `cls` the method of `cross_layer=name`: accepted by the config with its own fields (`cls.config_fields`,
    checked by `cls.check_config`), built by the model, in the costs and the presets."""
    taken = {*DepthAttentionConfig.__dataclass_fields__,
             *(field for other, method in METHODS.items() if other != name for field in method.config_fields)}
    if clash := sorted(taken & set(cls.config_fields)):
        raise ValueError(f"{cls.__name__} declares config fields that the backbone or another method has: {clash}")
    if issubclass(cls, AttentionMixer) and issubclass(cls, Residual):
        raise ValueError(f"{cls.__name__} derives from both AttentionMixer and Residual; a method is of one family "
                         "(docs/methods.md#what-the-model-calls)")
    if required := sorted(cls.__abstractmethods__):
        raise ValueError(f"{cls.__name__} (cross_layer={name!r}) does not define {', '.join(required)}, which its "
                         "family requires (docs/methods.md#what-the-model-calls)")
    if issubclass(cls, AttentionMixer) and not overrides_attention(cls):
        raise ValueError(f"{cls.__name__} (cross_layer={name!r}) is an AttentionMixer but defines neither forward (the "
                         "state a step attends with) nor attend (sequence attention itself), so it would run as the "
                         "plain decoder; define one (docs/methods.md#what-the-model-calls)")
    if missing := undeclared_costs(cls):
        raise ValueError(f"{cls.__name__} (cross_layer={name!r}) does not declare its costs: define the classmethods "
                         f"{', '.join(missing)} (docs/methods.md#costs), or derive it from NoExtraCost "
                         f"(class {cls.__name__}(NoExtraCost, CrossLayerMethod)) if it adds nothing over vanilla")
    METHODS[name] = cls
    INFERENCE_STATE[name] = cls.inference_state


def unregister(name: str):
    """Undo `register(name, ...)`: configs no longer accept `cross_layer=name` nor the method's fields."""
    del METHODS[name], INFERENCE_STATE[name]


for _name, _cls in (("vanilla", Vanilla), ("depth_attention", DepthAttention), ("value_residual", ValueResidual),
                    ("value_embeddings", ValueEmbeddings), ("denseformer", DenseFormer), ("attnres", AttnRes),
                    ("mhc", MHC), ("hyper_connections", HyperConnections), ("mudd", MUDD), ("moda", MoDA)):
    register(_name, _cls)


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
    method = getattr(getattr(model, "model", model), "cross_layer", None)
    tables = {id(p): p.numel() for module in (model.get_input_embeddings(), model.get_output_embeddings())
              if module is not None for p in module.parameters()} if hasattr(model, "get_input_embeddings") else {}
    total = sum(p.numel() for p in model.parameters())
    return {
        "total": total,
        "extra_over_vanilla": sum(p.numel() for p in method.parameters()) if method is not None else 0,
        "non_embedding": total - sum(tables.values()),
    }


def load_entry_points():
    """Register every method that an installed package declares in the entry-point group `depthattn.methods`
    (name: its `cross_layer`, value: `module:Class`)."""
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = entry.dist.name if entry.dist is not None else entry.value.split(":")[0]
        where = (f"the package {package} declares the cross-layer method {entry.name!r} ({entry.value}, entry point "
                 f"group {ENTRY_POINT_GROUP})")
        try:
            cls = entry.load()
        except Exception as error:
            raise ImportError(f"{where}, which cannot be loaded ({type(error).__name__}: {error}); fix or reinstall "
                              f"{package}, or uninstall it") from error
        if METHODS.get(entry.name) is cls:
            continue
        if entry.name in METHODS:
            raise ImportError(f"{where}, but {entry.name!r} is taken by {METHODS[entry.name].__name__}; rename the "
                              f"entry point in {package}")
        if not (isinstance(cls, type) and issubclass(cls, CrossLayerMethod)):
            raise ImportError(f"{where}, which is not a CrossLayerMethod subclass; fix {package}")
        try:
            register(entry.name, cls)
        except ValueError as error:
            raise ImportError(f"{where}, which depthattn refuses: {error}; fix {package}") from None


load_entry_points()

__all__ = [
    "AttentionMixer", "AttnRes", "COST_MEMBERS", "CrossLayerMethod", "DenseFormer", "DepthAttention",
    "ENTRY_POINT_GROUP", "FlopTerm", "HyperConnections", "INFERENCE_STATE", "METHODS", "MHC", "MUDD", "MoDA",
    "NoExtraCost", "Residual", "ValueEmbeddings", "ValueResidual", "Vanilla", "build_method", "count_parameters",
    "load_entry_points", "register", "undeclared_costs", "unregister",
]
