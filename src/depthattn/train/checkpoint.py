"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, RNG and data position, written atomically.

A checkpoint is a folder `step_XXXXXXXX/` that appears in one rename once every file in it is on disk,
so a run killed at any moment leaves only whole checkpoints behind. It is also a model folder that eval and
generate read (config, weights, tokenizer), and it records the settings a resumed run must share with it
(settings.json) and the sha256 of every file (checksums.json), checked before a run resumes from it.
"""

from __future__ import annotations

import json
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

from ..data.files import atomic_directory, atomic_write_json, checksum_problems, write_checksums

STEP_DIR = re.compile(r"^step_(\d{8})$")
WEIGHTS = "model.safetensors"
TRAINER_STATE = "trainer.pt"
SETTINGS = "settings.json"


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


def save_model_files(folder: Path, unwrapped, state: dict, tokenizer_path: Path | None):
    """A Hugging Face model folder: config, safetensors weights and the tokenizer's files."""
    unwrapped.save_pretrained(folder, state_dict=state)
    if tokenizer_path and Path(tokenizer_path).is_dir():
        for item in Path(tokenizer_path).iterdir():
            shutil.copy(item, folder / item.name)


def save_checkpoint(out_dir: Path, step: int, model, unwrapped, optimizer, scheduler, batches, keep: int,
                    extra: dict, settings: dict, tokenizer_path: Path | None) -> Path | None:
    """Every rank calls this (gathering sharded state is collective); rank 0 writes."""
    model_state = full_model_state(model)
    optim_state = get_optimizer_state_dict(model, optimizer, options=_options())
    if not is_main_process():
        return None
    path = Path(out_dir) / "checkpoints" / f"step_{step:08d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(path) as tmp:
        save_model_files(tmp, unwrapped, model_state, tokenizer_path)
        torch.save({"step": step, "optimizer": optim_state, "scheduler": scheduler.state_dict(),
                    "data": batches.state_dict(), "rng": rng_state(), **extra}, tmp / TRAINER_STATE)
        atomic_write_json(tmp / SETTINGS, settings)
        write_checksums(tmp)
    for old in list_checkpoints(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def list_checkpoints(out_dir: Path) -> list[Path]:
    folder = Path(out_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and STEP_DIR.match(p.name))


def checkpoint_problem(path: Path) -> str | None:
    """Why a run cannot resume from the checkpoint in `path`, or None when it is whole: its files all there
    and equal to their recorded sha256, and every weight finite."""
    missing = [name for name in (WEIGHTS, TRAINER_STATE) if not (path / name).is_file()]
    if missing:
        return f"{' and '.join(missing)} missing"
    problems = checksum_problems(path)
    if problems:
        return "; ".join(problems)
    try:
        nonfinite = nonfinite_tensors(load_file(path / WEIGHTS))
    except Exception as error:  # noqa: BLE001 - a truncated or garbled file (older checkpoints have no checksums)
        return f"cannot read {WEIGHTS}: {error}"
    if nonfinite:
        return f"{len(nonfinite)} weight tensors are not finite ({', '.join(nonfinite[:3])}, ...)"
    return None


def newest_good_checkpoint(out_dir: Path, report=None) -> Path | None:
    """The newest checkpoint without a problem; `report(path, problem)` hears of each newer damaged one."""
    for path in reversed(list_checkpoints(out_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if report:
            report(path, problem)
    return None


def saved_settings(path: Path) -> dict:
    """The settings a checkpoint was written with; for a checkpoint without settings.json (older depthattn),
    the model and data settings in the run's train_config.json."""
    if (path / SETTINGS).is_file():
        return json.loads((path / SETTINGS).read_text())
    try:
        config = json.loads((path.parent.parent / "train_config.json").read_text())
    except (OSError, ValueError):
        return {}
    return {**{f"model.{k}": v for k, v in config.get("model", {}).items()},
            "data.seq_len": config.get("data", {}).get("seq_len")}


def load_weights(path: Path, model):
    """Load a checkpoint's weights into a (possibly wrapped) model, before the optimizer state."""
    weights = path / WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"checkpoint {path} has no {WEIGHTS}; it is incomplete or not a checkpoint")
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
