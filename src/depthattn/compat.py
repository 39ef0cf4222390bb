"""Every use of a private transformers name (those `import depthattn` needs are in compat_light.py, those of
transformers' server in serving/transformers_serve.py): each says which public API is missing. A transformers
upgrade that moves one of them breaks a test (tests/test_compat.py), not a command at run time.

Below them, what differs between the supported releases (5.19 to 5.25): depthattn is written against the newest API,
and each shim gives an older release the same surface, detecting the feature, not the version number."""

from __future__ import annotations

import copy
import functools
import sys

import torch
import transformers.processing_utils  # noqa: F401  (see register_for_transformers_serve)
from transformers import CompileConfig, PreTrainedConfig, PreTrainedModel
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.output_capturing import OutputRecorder

from .compat_light import CACHE_NAME, TRANSFORMERS_AS_IMPORTED, config_generation_keys


def compile_on_any_device(config: CompileConfig) -> CompileConfig:
    """Let `generate` compile its decoding step on a CPU too; by itself it compiles on accelerators only, and
    `CompileConfig` has no public switch for it."""
    config._compile_all_devices = True  # type: ignore[assignment]  # declared None: a private switch
    return config


def attn_implementation(config: PreTrainedConfig) -> str:
    """The attention implementation a model runs (what transformers' own modeling files read); no public getter."""
    return config._attn_implementation


def with_attn_implementation(config: PreTrainedConfig, implementation: str) -> PreTrainedConfig:
    """A shallow copy of `config` that asks for another attention implementation, e.g. the eager masks when
    attention weights are wanted; `set_attn_implementation` exists on models only."""
    config = copy.copy(config)
    config._attn_implementation = implementation
    return config


def register_for_transformers_serve(model_class: type) -> None:
    """`transformers serve` finds a checkpoint's class as an attribute of the `transformers` package named by
    config.json `architectures` (cli/serving/model_manager.py), with no registration API. Importing
    transformers.processing_utils replaces that package module in sys.modules (direct_transformers_import), hence
    the import above: the class is set on the module that stays, and on the one that modules imported before it
    hold (the server's, imported after `import depthattn` but before the first config)."""
    for package in (TRANSFORMERS_AS_IMPORTED, sys.modules["transformers"]):
        setattr(package, model_class.__name__, model_class)


def cache_kwarg(forward):
    """`forward(cache=...)` that also takes `past_key_values=`: deprecated where transformers says `cache`, renamed
    silently where it still says `past_key_values` (what `generate` passes there at every step)."""
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)

    @functools.wraps(forward)
    def renamed(*args, **kwargs):
        if (cache := kwargs.pop("past_key_values", None)) is not None and kwargs.get("cache") is None:
            kwargs["cache"] = cache
        return forward(*args, **kwargs)

    return renamed


def cache_output(cls):
    """A model output dataclass (a transformers `...WithPast` output) that takes `cache=` and has `.cache`. Where
    transformers still says `past_key_values`, that stays the field (`generate` reads it) and `cache` is its alias."""
    if CACHE_NAME == "cache":
        return cls
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, cache=None, **kwargs):
        if cache is not None:
            kwargs["past_key_values"] = cache
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    cls.cache = property(lambda self: self.past_key_values)
    return cls


try:
    from transformers.modeling_utils import slice_logits_to_keep
except ImportError:  # before 5.21 each model sliced by an int or a 1D tensor itself; this slices as 5.24 does

    def slice_logits_to_keep(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
        if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.ndim == 2:
            if logits_to_keep.dtype == torch.bool:
                return hidden_states[logits_to_keep]
            return torch.take_along_dim(hidden_states, logits_to_keep[..., None], dim=1)
        kept = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return hidden_states[:, kept, :]


def output_recorder(target_class: type, **fields) -> OutputRecorder:
    """`OutputRecorder` without the fields a release lacks: `num_hidden_layers_key` came in 5.23 (before, a negative
    index in `output_hidden_states=[...]` selects nothing)."""
    known = OutputRecorder.__dataclass_fields__
    return OutputRecorder(target_class, **{name: value for name, value in fields.items() if name in known})


class ModelBackports:
    """A base of depthattn's models, before `PreTrainedModel`: the newest API where the installed release lacks it."""

    if not hasattr(PreTrainedModel, "activation_checkpointing_enable"):  # before 5.23: gradient_checkpointing_enable

        def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers=1,
                                            offload=False):
            self._activation_checkpointing_enable(activation_checkpointing_kwargs, every_n_layers, offload)

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None, every_n_layers=1, offload=False):
            """What transformers' Trainer calls: through the overridable hook as well."""
            self._activation_checkpointing_enable(gradient_checkpointing_kwargs, every_n_layers, offload)

        def _activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers=1,
                                             offload=False):
            """The hook a model overrides (to check the kwargs), as in 5.23."""
            # the ignore: mypy reads the installed release's signature, not that of the releases this branch runs on
            PreTrainedModel.gradient_checkpointing_enable(  # type: ignore[call-arg]
                self, activation_checkpointing_kwargs, every_n_layers, offload)  # type: ignore[arg-type]


__all__ = [
    "attn_implementation", "compile_on_any_device", "config_generation_keys", "register_for_transformers_serve",
    "with_attn_implementation",
    "CACHE_NAME", "ModelBackports", "cache_kwarg", "cache_output", "output_recorder", "slice_logits_to_keep",
]
