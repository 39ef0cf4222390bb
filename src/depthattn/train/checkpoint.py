"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, RNG and data position, written atomically.

A checkpoint is a folder `step_XXXXXXXX/` that appears in one rename once every file in it is on disk,
so a run killed at any moment leaves only whole checkpoints behind. It is also a model folder that eval and
generate read (config, weights, tokenizer), and it records the settings a resumed run must share with it
(settings.json) and the sha256 of every file (checksums.json), checked before a run resumes from it.
CheckpointManager holds these rules for one run: which checkpoint it resumes from, when it writes one, how many
it keeps, and the final model folder it exports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from ..checksums import checksum_problems, recorded_checksums, write_checksums
from ..data.manifest import read_manifest
from ..files import atomic_directory, atomic_write_json, make_folder, remove_temporaries, sha256_file, temporary_sibling
from ..loading import nonfinite_tensors
from .config import TrainConfig
from .optim import SCHEDULE_FIELDS, schedule_change, schedule_settings

STEP_DIR = re.compile(r"^step_(\d{8})$")
WEIGHTS = "model.safetensors"
TRAINER_STATE = "trainer.pt"
SETTINGS = "settings.json"


def _options() -> StateDictOptions:
    distributed = dist.is_available() and dist.is_initialized()
    return StateDictOptions(full_state_dict=True, cpu_offload=distributed)


def full_model_state(model) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict of a plain, DDP or FSDP2 model; collective under torchrun."""
    state = get_model_state_dict(model, options=_options())
    return {k: v.contiguous() for k, v in state.items()}  # type: ignore[union-attr]  # a model's: tensors only


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def state_bytes(*states) -> int:
    """The bytes of the tensors in (nested) state dicts: about what writing them takes on disk."""
    def walk(value):
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, dict):
            return sum(map(walk, value.values()))
        if isinstance(value, (list, tuple)):
            return sum(map(walk, value))
        return 0
    return sum(map(walk, states))


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


def copy_added_files(old: Path, new: Path):
    """Into the folder `new`: what the older `old` holds that `new` lacks (files a user added, e.g. a chat
    template), so that rewriting a model folder keeps them."""
    if not old.is_dir():
        return
    for item in old.iterdir():
        if not (new / item.name).exists():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, new / item.name)


def step_name(step: int) -> str:
    """The folder name of the checkpoint written after `step`."""
    return f"step_{step:08d}"


def checkpoint_step(checkpoint: Path) -> int:
    """The step of a checkpoint folder, read off its name (step_name's inverse)."""
    match = STEP_DIR.match(checkpoint.name)
    if match is None:
        raise ValueError(f"{checkpoint} is not a checkpoint folder: its name should read step_XXXXXXXX (8 digits)")
    return int(match[1])


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


def run_settings(cfg: TrainConfig, manifest: dict, tokenizer_dir: Path) -> dict:
    """What a resumed run must share with its checkpoint: the model, the sequence length, the training data
    (its shards' checksums, wherever the folder now is), the tokenizer and the micro-steps per step (the tokens
    before the checkpoint are counted at its tokens per step; the batch size is the data order's to check)."""
    tokenizer_files = sorted(tokenizer_dir.iterdir()) if tokenizer_dir.is_dir() else []
    settings = {
        **{f"model.{key}": value for key, value in dataclasses.asdict(cfg.model).items()},
        "data.seq_len": cfg.data.seq_len,
        "train.grad_accum": cfg.train.grad_accum,
        "data.train_sha256": [file["sha256"] for file in manifest["splits"]["train"]["files"]],
        "tokenizer.vocab_size": manifest["tokenizer"]["vocab_size"],
        "tokenizer.eos_id": manifest["tokenizer"]["eos_id"],
        "tokenizer.sha256": hashlib.sha256("".join(f"{p.name}:{sha256_file(p)}\n" for p in tokenizer_files)
                                           .encode()).hexdigest() if tokenizer_files else None,
    }
    return json.loads(json.dumps(settings))  # as settings.json gives it back


def resume_point(out_dir: Path, settings: dict, main: bool) -> Path | None:
    """The checkpoint --resume continues from: the newest whole one (newer damaged ones are reported), once the
    run's settings are checked against it; None when the run has none yet."""
    checkpoint = newest_good_checkpoint(out_dir, report=_report_damaged if main else None)
    if checkpoint is None and list_checkpoints(out_dir):
        raise RuntimeError(f"no checkpoint in {out_dir / 'checkpoints'} is whole (see above); move them away to "
                           "start again, or choose another --train.out_dir")
    if main and checkpoint is None:
        print(f"{out_dir} holds no checkpoint to resume from yet: training starts from scratch", file=sys.stderr)
    elif main and checkpoint != list_checkpoints(out_dir)[-1]:
        print(f"resuming from {checkpoint}, the newest whole checkpoint", file=sys.stderr)
    if checkpoint:
        check_resume_settings(checkpoint, settings)
    return checkpoint


def check_resume_settings(checkpoint: Path, settings: dict):
    saved = saved_settings(checkpoint)
    changed = [key for key in settings if key in saved and saved[key] != settings[key]]
    if changed:
        raise ValueError(
            f"cannot resume from {checkpoint}: "
            + "; ".join(f"{key} was {_short(saved[key])}, now {_short(settings[key])}" for key in changed)
            + ". The model, data, tokenizer and micro-steps per step must stay as the checkpoint has them: resume "
              "with its settings, "
              "or start a new run in another --train.out_dir")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _report_damaged(path: Path, problem: str):
    print(f"checkpoint {path} is damaged: {problem}", file=sys.stderr)


class CheckpointManager:
    """One run's checkpoints in `train.out_dir`: the one --resume continues from, one every `checkpoint_every`
    steps and at the last step, the newest `keep_checkpoints` kept, and `final/`, the exported model.

    Every rank calls save and export (gathering sharded state is collective); the main process writes.
    `reschedule` lets a resumed run change its learning-rate schedule, by a new train.steps or new schedule settings
    (optim.schedule, warmup_steps, ...), else an error."""

    def __init__(self, cfg: TrainConfig, resume: bool, is_main: bool, reschedule: bool = False):
        t = cfg.train
        self.out_dir = Path(t.out_dir)
        self.optim, self.reschedule, self.is_main = cfg.optim, reschedule, is_main
        # if the schedule changed: {"steps": the run length, "optim": the changed settings} the resumed steps followed
        self.rescheduled_from: dict | None = None
        self.every, self.keep, self.last_step = t.checkpoint_every, t.keep_checkpoints, t.steps
        if list_checkpoints(self.out_dir):
            if not resume:
                raise FileExistsError(f"{self.out_dir} already holds checkpoints; pass --resume to continue that run, "
                                      "or choose another --train.out_dir")
        elif (self.out_dir / "final").exists():  # a finished run whose checkpoints were deleted to free the disk
            raise FileExistsError(f"{self.out_dir} holds a finished run's model (final/) and no checkpoint to continue "
                                  f"it from: choose another --train.out_dir, or move {self.out_dir / 'final'} away to "
                                  "train there from scratch")
        make_folder(self.out_dir, "--train.out_dir")
        if is_main:  # what a killed run left of its atomic writes
            remove_temporaries(self.out_dir)
            remove_temporaries(self.out_dir / "checkpoints")
        manifest = read_manifest(cfg.data.path)
        self.tokenizer_path = Path(cfg.data.path) / manifest["tokenizer"]["path"]  # copied into every model folder
        self.settings = run_settings(cfg, manifest, self.tokenizer_path)
        self.resume_from = resume_point(self.out_dir, self.settings, is_main) if resume else None
        # the damaged checkpoints --resume passed over (newer than the one it took): never among the `keep` kept
        start = checkpoint_step(self.resume_from) if self.resume_from else 0
        self.passed_over = {checkpoint_step(path) for path in list_checkpoints(self.out_dir)
                            if checkpoint_step(path) > start}

    def load_weights(self, model):
        """The resumed checkpoint's weights into the model, before it is wrapped and its optimizer built."""
        if self.resume_from is None:
            return
        weights = self.resume_from / WEIGHTS
        if not weights.is_file():
            raise FileNotFoundError(f"checkpoint {self.resume_from} has no {WEIGHTS}; it is incomplete or not a "
                                    "checkpoint")
        state: dict[str, Any] = load_file(weights)
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def load_trainer_state(self, model, optimizer, scheduler, batches) -> int:
        """The resumed checkpoint's optimizer, schedule, data position and RNG; returns the step it was written
        after (0 for a run that starts afresh)."""
        if self.resume_from is None:
            return 0
        state_path = self.resume_from / TRAINER_STATE
        if not state_path.is_file():
            raise FileNotFoundError(f"checkpoint {self.resume_from} has no {TRAINER_STATE}; it is incomplete or not a "
                                    "checkpoint")
        try:
            state = torch.load(state_path, weights_only=True, map_location="cpu")
        except Exception as error:
            raise ValueError(f"cannot read {state_path} ({error}); the file is corrupt - delete this checkpoint "
                             "folder to resume from the one before") from None
        self._check_schedule(state["step"], state.get("schedule_steps") or self._planned("steps"),
                           state.get("schedule") or self._planned("schedule"))
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True))
        scheduler.load_state_dict(state["scheduler"])
        batches.load_state_dict(state["data"])
        set_rng_state(state["rng"])
        return state["step"]

    def _planned(self, what: str):
        """For an older checkpoint (without schedule_steps or schedule): the length ("steps") or the schedule
        settings ("schedule") of the run that wrote it, from its train_config.json (not yet rewritten by this run)."""
        try:
            config = json.loads((self.out_dir / "train_config.json").read_text())
            if what == "steps":
                return config["train"]["steps"]
            return {name: config["optim"][name] for name in SCHEDULE_FIELDS if name in config["optim"]}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _check_schedule(self, trained: int, planned_steps: int | None, planned_schedule: dict | None):
        """A resumed run may not be shorter than the steps it has, nor change its schedule (by its length or its
        schedule settings) unless told to."""
        if trained > self.last_step:
            raise ValueError(f"{self.out_dir} already has {trained} steps ({self.resume_from}), more than "
                             f"--train.steps {self.last_step}: to train a shorter run, use a new --train.out_dir, "
                             "or the cooldown branches of a WSD run (train.branch_steps)")
        saved = dataclasses.replace(self.optim, **(planned_schedule or {}))
        planned_steps = planned_steps or self.last_step
        change = schedule_change(trained, planned_steps, self.last_step, self.optim, saved)
        if not change:
            return
        changed = {name: value for name, value in schedule_settings(saved).items()
                   if value != getattr(self.optim, name)}
        if not self.reschedule:
            same = [f"--optim.{name} {value}" for name, value in changed.items()]
            if planned_steps != self.last_step:
                same.insert(0, f"--train.steps {planned_steps}")
            extends = "" if changed else ' (a run with optim.schedule = "wsd" extends cleanly in its stable phase)'
            raise ValueError(f"cannot resume {self.out_dir} as a run of {self.last_step} steps: {change}. Resume "
                             f"with {' '.join(same)}, as its checkpoint has it; or train the changed run in a new "
                             f"--train.out_dir{extends}; or pass --reschedule to continue with the changed schedule")
        if self.is_main:
            print(f"warning: --reschedule: resuming {self.out_dir} changes its learning-rate schedule: {change}; "
                  f"metrics.jsonl records it at step {trained + 1}", file=sys.stderr)
        self.rescheduled_from = {"steps": planned_steps, "optim": changed}

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.last_step

    def folder(self, step: int) -> Path:
        return self.out_dir / "checkpoints" / step_name(step)

    def save(self, step: int, model, unwrapped, optimizer, scheduler, batches, extra: dict) -> Path | None:
        """checkpoints/step_XXXXXXXX, then the older ones beyond the newest `keep` go."""
        model_state = full_model_state(model)
        optim_state = get_optimizer_state_dict(model, optimizer, options=_options())
        if not is_main_process():
            return None
        path = self.folder(step)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(path, needed=state_bytes(model_state, optim_state)) as tmp:
            save_model_files(tmp, unwrapped, model_state, self.tokenizer_path)
            torch.save({"step": step, "schedule_steps": self.last_step, "schedule": schedule_settings(self.optim),
                        "optimizer": optim_state,
                        "scheduler": scheduler.state_dict(), "data": batches.state_dict(), "rng": rng_state(),
                        **extra}, tmp / TRAINER_STATE)
            atomic_write_json(tmp / SETTINGS, self.settings)
            write_checksums(tmp)
        # a damaged one --resume passed over counts not among the newest `keep` (else the whole one just written,
        # or the one before it, would go) and goes once this run is past it (at its step, this run rewrote it)
        self.passed_over.discard(step)
        checkpoints = list_checkpoints(self.out_dir)
        whole = [old for old in checkpoints if checkpoint_step(old) not in self.passed_over]
        passed = [old for old in checkpoints
                  if checkpoint_step(old) in self.passed_over and checkpoint_step(old) < step]
        for old in whole[:-self.keep] + passed:
            # renamed first: a run stopped midway leaves a temporary folder, not a half-deleted checkpoint
            doomed = temporary_sibling(old)
            os.replace(old, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        return path

    def export(self, model, unwrapped):
        """final/: a Hugging Face folder (config, safetensors weights, tokenizer) that AutoModelForCausalLM loads.
        The files a user added to an older final/ stay."""
        state = full_model_state(model)
        if not is_main_process():
            return
        final = self.out_dir / "final"
        with atomic_directory(final, needed=state_bytes(state)) as tmp:
            save_model_files(tmp, unwrapped, state, self.tokenizer_path)
            copy_added_files(final, tmp)
            write_checksums(tmp)

    def final_is_current(self) -> bool:
        """Whether final/ holds the resumed checkpoint's weights (a finished run resumed has nothing to export)."""
        if self.resume_from is None:
            return False
        weights, recorded = self.out_dir / "final" / WEIGHTS, recorded_checksums(self.resume_from) or {}
        return weights.is_file() and sha256_file(weights) == recorded.get(WEIGHTS)
