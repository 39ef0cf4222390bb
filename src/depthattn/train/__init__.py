"""Training: typed config, AdamW + cosine schedule, the loop and its step, metrics, atomic resumable checkpoints,
DDP / FSDP2 under torchrun."""

from .config import MODEL_PRESETS, TrainConfig
from .interrupt import TrainingInterrupted
from .loop import build_model_config, train
from .step import TrainingDiverged, evaluate

__all__ = ["MODEL_PRESETS", "TrainConfig", "TrainingDiverged", "TrainingInterrupted", "build_model_config", "evaluate",
           "train"]
