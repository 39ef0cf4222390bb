"""Cross-layer methods behind `DepthAttentionConfig.cross_layer`: one registry (this module, which imports no torch),
and per method a description (descriptions/: its config fields, variants, capabilities and costs, no torch) and a
module (the nn.Module that runs it, deriving from its description), imported at its first use.

- `vanilla`: the plain decoder (neither family below); `depth_attention`: Depth-Attention (an `AttentionMixer`; its
  mixing: `depthattn.ops`; the states it mixes: `depthattn.layer_states`);
- hidden-state baselines (a `Residual`: how sublayer outputs are combined into the stream):
  `denseformer`, `attnres`, `mhc`, `hyper_connections` (docs/method.md#baselines);
- hidden-state relatives adopted since the paper: `mudd` (MUDDFormer);
- inside attention (an `AttentionMixer`), cache-free like Depth-Attention: `value_residual`, `value_embeddings`;
  `moda` (Mixture-of-Depths Attention: earlier layers' keys and values of the same token join the attention's
  softmax).

`DESCRIPTIONS` maps each name to its description, which the config, the presets and `--help` read; `METHODS` to its
module class, imported when first asked for. Their parameters live under `DepthAttentionModel.cross_layer`; vanilla
and Depth-Attention models have none. A method from another package registers itself through an entry point of the
group `depthattn.methods`, loaded at the registry's first use, so that every process (commands, pool workers, Slurm
jobs, `AutoModel` after `import depthattn`) knows it (docs/methods.md).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..lazy import lazy_names
from .descriptions.attnres import AttnResDescription
from .descriptions.base import (
    COST_MEMBERS,
    AttentionMixerDescription,
    ConfigField,
    FlopTerm,
    MethodDescription,
    NoExtraCost,
    check_members,
    is_module_class,
    undeclared_costs,
)
from .descriptions.denseformer import DenseFormerDescription
from .descriptions.depth_attention import DepthAttentionDescription
from .descriptions.hyper_connections import HyperConnectionsDescription
from .descriptions.mhc import MHCDescription
from .descriptions.moda import MoDADescription
from .descriptions.mudd import MUDDDescription
from .descriptions.value_embeddings import ValueEmbeddingsDescription
from .descriptions.value_residual import ValueResidualDescription
from .descriptions.vanilla import VanillaDescription

ENTRY_POINT_GROUP = "depthattn.methods"  # where another package declares its methods

_descriptions: dict[str, type[MethodDescription]] = {}
_modules: dict[str, type[Any]] = {}  # the module classes imported so far
_backbone_fields: set[str] = set()  # the config's own fields, which no method may declare (`reserve_fields`)
_entry_points_loaded = False


def _registered() -> dict[str, type[MethodDescription]]:
    """The descriptions, once the installed packages' entry points are registered (at the first use, not at import:
    a package's method module may import depthattn itself)."""
    global _entry_points_loaded
    if not _entry_points_loaded:
        _entry_points_loaded = True
        try:
            load_entry_points()
        except ImportError:
            _entry_points_loaded = False  # the next use says it again
            raise
    return _descriptions


Entry = TypeVar("Entry")


class _Registry(Mapping[str, Entry]):
    """A read-only view of the registry by name: `value(name)` gives each entry."""

    def __init__(self, value: Callable[[str], Entry], what: str):
        self._value, self.__doc__ = value, what

    def __getitem__(self, name: str) -> Entry:
        if name not in _registered():
            raise KeyError(name)
        return self._value(name)

    def __contains__(self, name: object) -> bool:
        return name in _registered()

    def __iter__(self) -> Iterator[str]:
        return iter(list(_registered()))

    def __len__(self) -> int:
        return len(_registered())

    def __repr__(self) -> str:
        return f"<{self.__doc__}: {', '.join(self)}>"


def _module_class(name: str) -> type[Any]:  # a CrossLayerMethod of its family, with its family's members
    if name not in _modules:
        loaded = _descriptions[name].module_class()
        loaded.check_family(name)
        _modules[name] = loaded
    return _modules[name]


DESCRIPTIONS: Mapping[str, type[MethodDescription]] = _Registry(_descriptions.__getitem__, "descriptions by name")
METHODS: Mapping[str, type[Any]] = _Registry(_module_class, "module classes by name, imported at first use")
INFERENCE_STATE: Mapping[str, str] = _Registry(lambda name: _descriptions[name].inference_state,
                                               "the extra state each method holds at inference, over vanilla")


def register(name: str, method: type[MethodDescription]):
    """Make `method` the method of `cross_layer=name`: accepted by the config with its own fields
    (`method.config_fields`, checked by `method.check_config`), built by the model, in the costs and the presets.
    `method` is its description, whose `module` names its module class (imported at first use), or a
    `CrossLayerMethod`, its own description."""
    others = [described for other, described in _descriptions.items() if other != name]
    taken = {*_backbone_fields, *(field for described in others for field in described.config_fields)}
    if clash := sorted(taken & set(method.config_fields)):
        raise ValueError(f"{method.__name__} declares config fields that the backbone or another method has: {clash}")
    if is_module_class(method):
        method.check_family(name)
    else:
        check_members(method, name)
        if not method.module:
            raise ValueError(f"{method.__name__} (cross_layer={name!r}) is a description without its module: set "
                             "its module to 'package.module:Class', the CrossLayerMethod that runs it "
                             "(docs/methods.md)")
    if missing := undeclared_costs(method):
        raise ValueError(f"{method.__name__} (cross_layer={name!r}) does not declare its costs: define the "
                         f"classmethods {', '.join(missing)} (docs/methods.md#costs), or derive it from NoExtraCost "
                         f"(class {method.__name__}(NoExtraCost, ...)) if it adds nothing over vanilla")
    _descriptions[name] = method
    _modules.pop(name, None)
    if is_module_class(method):
        _modules[name] = method


def unregister(name: str):
    """Undo `register(name, ...)`: configs no longer accept `cross_layer=name` nor the method's fields."""
    del _descriptions[name]
    _modules.pop(name, None)


def reserve_fields(names):
    """Refuse `names` (the config's own fields) as a method's fields, from now on and among those registered."""
    if clash := sorted({f for described in _descriptions.values() for f in described.config_fields} & set(names)):
        raise ValueError(f"registered methods declare config fields that the backbone has: {clash}")
    _backbone_fields.update(names)


for _name, _description in (
        ("vanilla", VanillaDescription), ("depth_attention", DepthAttentionDescription),
        ("value_residual", ValueResidualDescription), ("value_embeddings", ValueEmbeddingsDescription),
        ("denseformer", DenseFormerDescription), ("attnres", AttnResDescription), ("mhc", MHCDescription),
        ("hyper_connections", HyperConnectionsDescription), ("mudd", MUDDDescription), ("moda", MoDADescription)):
    register(_name, _description)


def load_entry_points():
    """Register every method that an installed package declares in the entry-point group `depthattn.methods`
    (name: its `cross_layer`, value: `module:Class`, its description or its `CrossLayerMethod`)."""
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = entry.dist.name if entry.dist is not None else entry.value.split(":")[0]
        where = (f"the package {package} declares the cross-layer method {entry.name!r} ({entry.value}, entry point "
                 f"group {ENTRY_POINT_GROUP})")
        try:
            method = entry.load()
        except Exception as error:
            raise ImportError(f"{where}, which cannot be loaded ({type(error).__name__}: {error}); fix or reinstall "
                              f"{package}, or uninstall it") from error
        if _descriptions.get(entry.name) is method:
            continue
        if entry.name in _descriptions:
            raise ImportError(f"{where}, but {entry.name!r} is taken by {_descriptions[entry.name].__name__}; rename "
                              f"the entry point in {package}")
        if not (isinstance(method, type) and issubclass(method, MethodDescription)):
            raise ImportError(f"{where}, which is neither a MethodDescription nor a CrossLayerMethod subclass; fix "
                              f"{package}")
        try:
            register(entry.name, method)
        except ValueError as error:
            raise ImportError(f"{where}, which depthattn refuses: {error}; fix {package}") from None


_TORCH_NAMES = {  # public name: the module (importing torch) that defines it, imported at its first use
    "AttentionMixer": "base", "CrossLayerMethod": "base", "Residual": "base", "overrides_attention": "base",
    "build_method": "build", "count_parameters": "build",
    "Vanilla": "vanilla", "DepthAttention": "depth_attention", "ValueResidual": "value_residual",
    "ValueEmbeddings": "value_embeddings", "DenseFormer": "denseformer", "AttnRes": "attnres", "MHC": "mhc",
    "HyperConnections": "hyper_connections", "MUDD": "mudd", "MoDA": "moda",
}
__getattr__, __dir__ = lazy_names(__name__, _TORCH_NAMES)

__all__ = [
    "COST_MEMBERS", "AttentionMixerDescription", "DESCRIPTIONS", "ENTRY_POINT_GROUP", "INFERENCE_STATE", "METHODS",
    "ConfigField", "FlopTerm", "MethodDescription", "NoExtraCost", "load_entry_points", "register", "reserve_fields",
    "undeclared_costs", "unregister", *sorted(_TORCH_NAMES),
]
