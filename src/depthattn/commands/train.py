"""`depthattn train`: train (or resume) a model from a TOML config and `--section.key value` overrides.

Ctrl-C or SIGTERM stops it after the current step with a checkpoint there, one line on stderr naming it and the
command that resumes, and the signal's exit status (130, 143); a second one stops it at once
(depthattn/train/interrupt.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..train import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..train.config import config_keys  # the config alone: depthattn.train loads its loop at first use

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("Any config value can be overridden: --optim.lr 3e-4 --train.steps 100, and any field of the "
                     "model's config as --model.overrides.NAME (e.g. --model.overrides.num_hidden_layers 8).\n"
                     "Config keys (type, default):\n"
                     + "\n".join(f"  {key:<34} {kind:<6} {default!r}" for key, kind, default in config_keys())
                     + "\ntrain.batch_size is per process and micro-step: under torchrun a step takes batch_size x "
                     "grad_accum x processes sequences (a run's first line prints its tokens per step), so divide it "
                     "by the processes to train a one-process run's batch; a study's train.batch_size is a cell's "
                     "whole batch, which --tasks-per-cell splits.")
    parser.add_argument("--config", help="a TOML training config (see configs/)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out_dir")
    parser.add_argument("--reschedule", action="store_true",
                        help="with --resume: let a new train.steps or new schedule settings (optim.schedule, "
                             "warmup_steps, ...) change the learning-rate schedule of the steps still to train "
                             "(extending a cosine run); without it, such a resume is an error")


def run(args: argparse.Namespace) -> int:
    """`depthattn train`; `args.overrides` are the command line's --section.key value pairs."""
    from ..train import TrainConfig, TrainingInterrupted, train

    main = os.environ.get("RANK", "0") == "0"
    cfg = TrainConfig.load(args.config, args.overrides)
    created = missing_folders(Path(cfg.train.out_dir))
    try:
        summary = train(cfg, resume=args.resume, reschedule=args.reschedule)
    except TrainingInterrupted as stopped:
        if main:
            resume = "" if stopped.complete else f"; resume with: {resume_command(args)}"
            print(f"depthattn train: {stopped}{resume}", file=sys.stderr, flush=True)
        return stopped.exit_status
    finally:
        if main:  # a run refused before it wrote anything leaves no folder behind
            remove_empty(created)
    if main:
        print(human_summary(cfg, summary))
    return 0


def missing_folders(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    return [folder for folder in (path, *path.parents) if not folder.exists()]


def remove_empty(folders: list[Path]):
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty (the run wrote something), or never made
            folder.rmdir()


def human_summary(cfg: TrainConfig, summary: dict) -> str:
    """What the run did, where its model is, and how to score it on the whole held-out split."""
    t, out_dir = cfg.train, Path(cfg.train.out_dir)
    lines = [f"done: {summary['step']:,} steps"]
    if "loss" in summary:
        lines[0] += f", {summary['tokens']:,} tokens; last training loss {summary['loss']:.4f}"
    if "val_loss" in summary:
        lines.append(f"validation loss {summary['val_loss']:.4f} on {scored_batches(cfg)} of the held-out split")
    if "val_loss_whole_split" in summary:
        lines.append(f"validation loss on the whole held-out split: {summary['val_loss_whole_split']:.4f}")
    if t.branch_steps:
        lines.append(f"every budget's model and loss: {out_dir / 'branches.json'}")
    lines.append(f"model: {out_dir / 'final'}")
    lines.append(f"score it on the whole held-out split: depthattn eval {shlex.quote(str(out_dir / 'final'))} "
                 f"--data {shlex.quote(cfg.data.path)}")
    return "\n".join(lines)


def scored_batches(cfg: TrainConfig) -> str:
    """Which batches of the held-out split the run's validation loss read: the first train.eval_batches, or all of
    them where the split has no more."""
    from ..data.shards import TokenShards, count_eval_batches

    batch = cfg.train.batch_size * int(os.environ.get("WORLD_SIZE", "1"))  # per step, over every process
    available = count_eval_batches(TokenShards(cfg.data.path, "val"), batch, cfg.data.seq_len)
    if available == 1:
        return f"its only batch (train.eval_batches is {cfg.train.eval_batches})"
    if available <= cfg.train.eval_batches:
        return f"all {available} batches (train.eval_batches is {cfg.train.eval_batches})"
    batches = "batch" if cfg.train.eval_batches == 1 else f"{cfg.train.eval_batches} batches"
    return f"the first {batches} (train.eval_batches)"


def resume_command(args: argparse.Namespace) -> str:
    """This command line with --resume (under torchrun: its launch, which only it knows, then this)."""
    command = shlex.join(["depthattn", "train", *(["--config", args.config] if args.config else []),
                          *args.overrides, "--resume", *(["--reschedule"] if args.reschedule else [])])
    return f"torchrun <the same options> -m {command}" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else command
