"""Cooldown branches: one WSD run gives the model of every shorter budget in `train.branch_steps`.

A WSD run of B steps takes the peak rate up to its decay start s(B) = B - round(decay_fraction * B), then decays.
Up to s(B) it is the same run as any longer one of the same settings. So the run trains its stable phase once and,
when it reaches s(B), saves a checkpoint there, copies it into `branches/steps_B/` and trains B's decay from it as
a run of B steps resumed from that checkpoint (weights, AdamW state, data position and RNG). That branch equals a
standalone WSD run of B steps, bitwise on a CPU (tests/train/test_branches.py). The run then goes on from s(B) as
if it had never branched, to its own budget, train.steps, which is the longest.

Every budget, branches and the run itself, is scored on the whole validation split (the training loop's held-out
batches: non-overlapping windows, the last partial one left out, so a little off `depthattn eval`'s number for the
same weights; docs/commands.md says how the held-out losses differ), and recorded in
`branches.json` once its folder is final: {"B": {"steps", "decay_start", "tokens", "val_loss", "folder"}}, the
folder relative to the run's (the run's own budget is "."). A run
that is killed resumes where it stopped: a recorded branch is not trained again, and an unfinished one resumes from
its own newest checkpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch.distributed as dist

from ..files import atomic_directory, atomic_write_json, read_json_object
from .checkpoint import list_checkpoints
from .config import TrainConfig

RECORD = "branches.json"


def branch_folder(out_dir: str | Path, budget: int) -> Path:
    return Path(out_dir) / "branches" / f"steps_{budget}"


def branch_config(cfg: TrainConfig, budget: int) -> TrainConfig:
    """The config of the branch of `budget` steps: the run's own with that length, in the branch's folder. Its
    metrics go to its own metrics.jsonl only (TensorBoard and W&B follow the run itself)."""
    data = cfg.to_dict()
    data["train"].update(steps=budget, branch_steps=[], out_dir=str(branch_folder(cfg.train.out_dir, budget)))
    data["logging"].update(tensorboard=False, wandb=False)
    return TrainConfig.from_dict(data, source=f"branch of {budget} steps")


class Branches:
    """The branches of one run: where each forks off, which are recorded, and the record itself."""

    def __init__(self, cfg: TrainConfig, resume: bool, is_main: bool):
        self.cfg, self.is_main = cfg, is_main
        self.out_dir = Path(cfg.train.out_dir)
        self.path = self.out_dir / RECORD
        self.recorded = read_json_object(self.path) if resume and self.path.exists() else {}
        self.forks = {budget: cfg.optim.decay_start(budget)
                      for budget in sorted(set(cfg.train.branch_steps) - {cfg.train.steps})}

    def due(self, step: int) -> list[int]:
        """The unrecorded branches that fork at `step` or earlier; those forking earlier must have their folder
        already (a run that resumes past a fork has trained that branch's start)."""
        due = [budget for budget, fork in self.forks.items() if fork <= step and str(budget) not in self.recorded]
        for budget in due:
            if self.forks[budget] < step and not list_checkpoints(branch_folder(self.out_dir, budget)):
                raise ValueError(f"{self.out_dir} is past step {self.forks[budget]}, where the branch of {budget} "
                                 "steps leaves the run, and that branch was never started: drop it from "
                                 "train.branch_steps, or train it as a run of its own")
        return due

    def start(self, budget: int, checkpoint: Path) -> TrainConfig:
        """The branch's config, its folder holding the run's checkpoint at its fork (once; a resumed branch keeps
        its own newer checkpoints)."""
        cfg = branch_config(self.cfg, budget)
        folder = Path(cfg.train.out_dir)
        if self.is_main and not list_checkpoints(folder):
            (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
            with atomic_directory(folder / "checkpoints" / checkpoint.name) as tmp:
                shutil.copytree(checkpoint, tmp, dirs_exist_ok=True)
        if dist.is_initialized():  # every process reads the copy
            dist.barrier()
        return cfg

    def record(self, budget: int, tokens: int, val_loss: float) -> dict:
        entry = {"steps": budget, "decay_start": self.cfg.optim.decay_start(budget), "tokens": tokens,
                 "val_loss": val_loss, "folder": str(branch_folder(".", budget)) if budget in self.forks else "."}
        self.recorded[str(budget)] = entry
        if self.is_main:
            atomic_write_json(self.path, dict(sorted(self.recorded.items(), key=lambda item: int(item[0]))))
        return entry
