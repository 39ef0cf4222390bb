"""Training: typed config, AdamW + cosine schedule, the loop and its step, metrics, atomic resumable checkpoints,
DDP / FSDP2 under torchrun.

The config is imported eagerly (it is light: `depthattn train --help` lists its keys); the loop, its step and the
signal handling load at their first use (PEP 562), so `depthattn.train.config` imports no modeling code."""

from ..lazy import lazy_names
from .config import MODEL_PRESETS, TrainConfig

_LAZY = {  # public name: the module that defines it, imported at its first use
    "TrainingInterrupted": "interrupt",
    "build_model_config": "loop",
    "train": "loop",
    "TrainingDiverged": "step",
    "evaluate": "step",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
__all__ = ["MODEL_PRESETS", "TrainConfig", *sorted(_LAZY)]
