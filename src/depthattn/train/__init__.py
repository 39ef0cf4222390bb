"""Training: typed config, AdamW + cosine schedule, atomic resumable checkpoints, DDP / FSDP2 under torchrun."""

from .config import MODEL_PRESETS, TrainConfig
from .loop import TrainingDiverged, build_model_config, evaluate, train

__all__ = ["MODEL_PRESETS", "TrainConfig", "TrainingDiverged", "build_model_config", "evaluate", "train"]
