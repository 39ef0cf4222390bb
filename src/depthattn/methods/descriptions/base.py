"""What a cross-layer method is without a model, importing no torch: `MethodDescription` (its config fields, named
variants, where it runs, what it tells about itself, its costs), read by the config, the presets, `--help` and the
costs; the method's module class (methods/base.py: `CrossLayerMethod`) derives from its description."""

from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:  # the module classes import torch; a description names them only in annotations
    from ..base import CrossLayerMethod


@dataclasses.dataclass(frozen=True)
class ConfigField:
    """A config field of a cross-layer method (`MethodDescription.config_fields`): its default and its meaning."""

    default: object
    doc: str


@dataclasses.dataclass(frozen=True)
class FlopTerm:
    """One kind of extra arithmetic, per token. `op`: how our model runs it ("matmul": mm / bmm / mv, which
    FlopCounterMode counts; "elementwise": multiplies, adds and sums). `role`: "weights" (computing the mixing
    weights: depth scores, AttnRes logits, hyper-connection coefficients) or "mix" (the weighted sums themselves).
    `paper` / `model`: whether the paper's convention / the literal count of our model includes it."""

    what: str
    flops: int
    op: str
    role: str = "mix"
    paper: bool = True
    model: bool = True


# ABCMeta, with no abstract member here: a family (descriptions/streams.py, methods/base.py) declares its own, which
# `check_members` reads from `__abstractmethods__`
class MethodDescription(metaclass=abc.ABCMeta):  # noqa: B024
    """What is known about a `DepthAttentionConfig.cross_layer` method without building a model: its config, where it
    runs, what it tells about itself and its costs, all class attributes and classmethods of the config. It imports
    no torch, so that the config and `depthattn --help` read it without the model.

    `module` names the nn.Module class that runs it, "package.module:Class", imported at its first use
    (`depthattn.methods.METHODS`); that class derives from the description and from the protocol of its family
    (`depthattn.methods.AttentionMixer` or `Residual`). A `CrossLayerMethod` is a description too, so a method may
    also be one class that declares everything.

    `config_fields` declares the method's own `DepthAttentionConfig` fields (name: default and meaning), which every
    config then has; `check_config` checks their values. `inference_state` states the extra state the method holds at
    inference (docs/method.md#baselines).

    Analytic costs per token over a vanilla decoder with the same backbone, in the conventions of
    `depthattn.evaluate.costs` (L = unrolled depth, D = hidden size, d_kv = num_key_value_heads * head_dim):
    `extra_parameters`, `flop_terms`, `io_elements` and `extra_state_elements` at a context (`COST_MEMBERS`). Every
    method defines them, or derives from `NoExtraCost` to say it adds none; `register` refuses one that does
    neither, so that no method reports zero costs by omission.
    """

    module: str = ""  # its nn.Module class, "package.module:Class"

    # its config: its own fields, named variants of them, and those that change how it computes, not what (its
    # kernels), which a built model switches in place (`DepthAttentionPreTrainedModel.switch_method_field`)
    config_fields: dict[str, ConfigField] = {}
    presets: dict[str, dict] = {}  # named variants: config fields over the method's defaults (depthattn.presets)
    switchable_fields: tuple[str, ...] = ()
    # per switchable field, the values it switches to on any machine (no GPU, no compiler): the conformance suite
    # switches a built model to each and expects the same outputs
    switch_values: dict[str, tuple] = {}
    # settings besides the defaults that every check of the conformance suite (tests/methods/test_conformance.py, the
    # looped, continuous-batching, checkpointing, tensor-parallel and vLLM tests) runs too, each taking code paths the
    # defaults do not: name -> config fields over the defaults
    checked_variants: dict[str, dict] = {}

    # where it runs, and why not where it cannot (see also `check_tensor_parallel`); everywhere else it runs: looped,
    # with activation checkpointing, continuous batching, tensor parallelism (the conformance suite checks each)
    # reentrant activation checkpointing keeps every gradient only when nothing reaches a layer except its
    # positional tensor inputs (no depth states, no stream object), i.e. the vanilla decoder
    reentrant_checkpointing_safe: bool = False
    packed_refusal: str = ""  # why it cannot run packed sequences (continuous batching, flash varlen), if it cannot
    vllm_refusal: str = ""  # why the vLLM plugin (depthattn.serving.vllm) cannot serve the method; empty: it can

    # what it tells about itself (with the analytic costs below)
    inference_state: str = ""
    maps_depth_weights: bool = False  # `output_depth_weights` weighs each step's sources per token (a depth map)
    # the title of its depth map (`depthattn depth-map`), formatted with the map's record: `cross_layer`, `samples`,
    # `seq_len` and the method's `settings`
    depth_map_title: str = "{cross_layer} depth weights ({samples} x {seq_len} tokens)"

    @classmethod
    def module_class(cls) -> type[CrossLayerMethod]:
        """The nn.Module class named by `module`, which must derive from this description."""
        path, _, name = cls.module.partition(":")
        if not (path and name):
            raise ValueError(f"{cls.__name__} names no module class ({cls.module=!r}): set module to "
                             "'package.module:Class', a CrossLayerMethod deriving from it (docs/methods.md)")
        loaded = getattr(importlib.import_module(path), name, None)
        if not (isinstance(loaded, type) and issubclass(loaded, cls) and is_module_class(loaded)):
            raise ValueError(f"{cls.__name__}.module is {cls.module!r}, which is not a CrossLayerMethod deriving from "
                             f"{cls.__name__}; derive it from the description and its family (docs/methods.md)")
        return loaded

    @classmethod  # noqa: B027  (a hook with a default: a method without fields checks none)
    def check_config(cls, config):
        """Raise ValueError, naming the field, if a value of `config_fields` is invalid (every config is checked by
        every method, whatever its `cross_layer`)."""

    @classmethod
    def settings(cls, config) -> dict:
        """The method's config fields as the model runs them (defaults resolved), for messages and records."""
        return {name: getattr(config, name) for name in cls.config_fields}

    @classmethod  # noqa: B027  (a hook with a default: most methods split over any number of ranks)
    def check_tensor_parallel(cls, config, ranks: int):
        """Raise ValueError, naming `tensor_parallel_size` and the fix, where the method cannot be split over `ranks`
        tensor-parallel ranks (vLLM's, and transformers' `tp_plan`)."""

    @classmethod
    def extra_parameters(cls, config) -> int:
        """Parameters of the method (`count_parameters(model)["extra_over_vanilla"]`)."""
        raise _undeclared_cost(cls)

    @classmethod
    def flop_terms(cls, config) -> list[FlopTerm]:
        """The extra arithmetic per token, term by term."""
        raise _undeclared_cost(cls)

    @classmethod
    def io_elements(cls, config) -> dict[str, int]:
        """Extra activation elements read and written per token: {"read": ..., "write": ...}."""
        raise _undeclared_cost(cls)

    @classmethod
    def extra_state_elements(cls, config, context: int) -> int:
        """Elements held beyond the vanilla KV cache at the peak of a prefill of `context` tokens."""
        raise _undeclared_cost(cls)

    @classmethod
    def cost_details(cls, config) -> dict:
        """Method-specific entries of its `depthattn.evaluate.costs.method_costs` record."""
        return {}


def is_module_class(cls: type[MethodDescription]) -> TypeGuard[type[CrossLayerMethod]]:
    """Whether `cls` is a module class (a `CrossLayerMethod`, its own `module_class`), not a description only."""
    # mypy types a classmethod read from a class as a plain callable, without the `__func__` it has
    return cls.module_class.__func__ is not MethodDescription.module_class.__func__  # type: ignore[attr-defined]


class AttentionMixerDescription(MethodDescription):
    """The description of a method acting inside attention (`depthattn.methods.AttentionMixer`): every such method
    declares which earlier steps each unrolled step reads, known from the config alone (the depth map and the costs
    read it without the module)."""

    @staticmethod
    @abc.abstractmethod
    def step_sources(config) -> list[list[int]]:
        """For every unrolled step, the earlier steps whose attention state it reads (may be none: `[]`)."""


class ResidualDescription(MethodDescription):
    """The description of a method that owns the residual stream (`depthattn.methods.Residual`): what the family
    says about every such method."""

    inference_state = "none"
    vllm_refusal = ("it changes the residual stream between layers, keeping earlier blocks' outputs per token "
                    "(docs/method.md#baselines), and the vLLM model keeps vLLM's plain residual stream")


def check_members(cls: type[MethodDescription], name: str):
    """Raise ValueError if `cls` leaves a member of its family abstract."""
    if required := sorted(cls.__abstractmethods__):
        raise ValueError(f"{cls.__name__} (cross_layer={name!r}) does not define {', '.join(required)}, which its "
                         "family requires (docs/methods.md#what-the-model-calls)")


COST_MEMBERS = ("extra_parameters", "flop_terms", "io_elements", "extra_state_elements")


def undeclared_costs(cls: type[MethodDescription]) -> list[str]:
    """The cost members that `cls` leaves to `MethodDescription`, which has no numbers to give."""
    return [name for name in COST_MEMBERS if getattr(cls, name).__func__ is getattr(MethodDescription, name).__func__]


def _undeclared_cost(cls) -> NotImplementedError:
    return NotImplementedError(f"{cls.__name__} does not declare its costs: define {', '.join(undeclared_costs(cls))} "
                               "(docs/methods.md#costs), or derive it from NoExtraCost if it adds none")


class NoExtraCost:
    """Mixed into a method (before `MethodDescription` or `CrossLayerMethod`) to declare that it costs nothing over
    the vanilla decoder: no parameters, arithmetic, activation traffic or state."""

    @classmethod
    def extra_parameters(cls, config) -> int:
        return 0

    @classmethod
    def flop_terms(cls, config) -> list[FlopTerm]:
        return []

    @classmethod
    def io_elements(cls, config) -> dict[str, int]:
        return {"read": 0, "write": 0}

    @classmethod
    def extra_state_elements(cls, config, context: int) -> int:
        return 0
