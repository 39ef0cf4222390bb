"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, RNG and data position, written atomically.

A checkpoint is a folder `step_XXXXXXXX/` that appears in one rename once every file in it is on disk,
so a run killed at any moment leaves only whole checkpoints behind.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict,
    set_optimizer_state_dict,
)

from ..data.files import atomic_directory

STEP_DIR = re.compile(r"^step_(\d{8})$")
TRAINER_STATE = "trainer.pt"


def _options() -> StateDictOptions:
    distributed = dist.is_available() and dist.is_initialized()
    return StateDictOptions(full_state_dict=True, cpu_offload=distributed)


def full_model_state(model) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict of a plain, DDP or FSDP2 model; collective under torchrun."""
    return {k: v.contiguous() for k, v in get_model_state_dict(model, options=_options()).items()}


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def nonfinite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors of `state` that hold a NaN or an infinity."""
    return [name for name, tensor in state.items() if tensor.is_floating_point() and not tensor.isfinite().all()]


def rng_state() -> dict:
    """Torch's generators (dropout, sampling); the data order has its own seeded generator."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict):
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_checkpoint(out_dir: Path, step: int, model, unwrapped, optimizer, scheduler, batches, keep: int,
                    extra: dict) -> Path | None:
    """Every rank calls this (gathering sharded state is collective); rank 0 writes."""
    model_state = full_model_state(model)
    optim_state = get_optimizer_state_dict(model, optimizer, options=_options())
    if not is_main_process():
        return None
    path = Path(out_dir) / "checkpoints" / f"step_{step:08d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(path) as tmp:
        unwrapped.save_pretrained(tmp, state_dict=model_state)
        torch.save({"step": step, "optimizer": optim_state, "scheduler": scheduler.state_dict(),
                    "data": batches.state_dict(), "rng": rng_state(), **extra}, tmp / TRAINER_STATE)
    for old in list_checkpoints(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def list_checkpoints(out_dir: Path) -> list[Path]:
    folder = Path(out_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and STEP_DIR.match(p.name))


def load_weights(path: Path, model):
    """Load a checkpoint's weights into a (possibly wrapped) model, before the optimizer state."""
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"checkpoint {path} has no model.safetensors; it is incomplete or not a checkpoint")
    set_model_state_dict(model, load_file(weights), options=StateDictOptions(full_state_dict=True))


def load_trainer_state(path: Path, model, optimizer, scheduler, batches) -> dict:
    state_path = path / TRAINER_STATE
    if not state_path.is_file():
        raise FileNotFoundError(f"checkpoint {path} has no {TRAINER_STATE}; it is incomplete or not a checkpoint")
    try:
        state = torch.load(state_path, weights_only=True, map_location="cpu")
    except Exception as error:
        raise ValueError(f"cannot read {state_path} ({error}); the file is corrupt - delete this checkpoint "
                         "folder to resume from the one before") from None
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True))
    scheduler.load_state_dict(state["scheduler"])
    batches.load_state_dict(state["data"])
    set_rng_state(state["rng"])
    return state
