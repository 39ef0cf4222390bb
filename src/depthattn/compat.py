"""Every use of a private transformers name, in one place: each says which public API is missing. A transformers
upgrade that moves one of them breaks a test here (tests/test_compat.py), not a command at run time."""

from __future__ import annotations

import copy
import sys

import transformers.processing_utils  # noqa: F401  (see register_for_transformers_serve)
from transformers import CompileConfig, GenerationConfig, PreTrainedConfig


def config_generation_keys() -> set[str]:
    """The generation settings that model configs used to carry (now in generation_config.json), which transformers
    still accepts in a model config; no public list exists."""
    return set(GenerationConfig._get_default_generation_params())


def compile_on_any_device(config: CompileConfig) -> CompileConfig:
    """Let `generate` compile its decoding step on a CPU too; by itself it compiles on accelerators only, and
    `CompileConfig` has no public switch for it."""
    config._compile_all_devices = True
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
    the import above: the class is set on the module that stays."""
    setattr(sys.modules["transformers"], model_class.__name__, model_class)


def served_model(serve, name: str):
    """The (model, processor) entry `transformers serve` loaded for `name`; its model manager is private."""
    return serve._model_manager.loaded_models[name]


def start_cb_worker(serve, model_id: str, model) -> None:
    """Start the continuous-batching worker now, allocating its paged cache, instead of at the first request; its
    generation state is private. The worker's shared sampling settings are then the model's generation config."""
    manager = serve._generation_state.get_manager(model_id, use_cb=True)
    manager.init_cb(model, copy.deepcopy(model.generation_config))


def cb_worker_error(serve) -> str | None:
    """Why the continuous-batching worker died, or None while it runs (or before it starts)."""
    manager = serve._generation_state._cb_manager
    if manager is None or manager.is_alive():
        return None
    return str(manager._cb.background_thread_status.fatal_error)


def stop_generation(serve) -> None:
    """Stop the server's generation worker (continuous batching's thread); its state object is private."""
    serve._generation_state.shutdown()


__all__ = [
    "attn_implementation", "compile_on_any_device", "config_generation_keys", "register_for_transformers_serve",
    "served_model", "start_cb_worker", "cb_worker_error", "stop_generation", "with_attn_implementation",
]
