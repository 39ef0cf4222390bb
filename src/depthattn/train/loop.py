"""The training loop: data -> model -> AdamW steps, with validation, metrics, checkpoints and resume."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging

from .. import DepthAttentionConfig, DepthAttentionForCausalLM, method_settings
from ..convert import load_backbone
from ..data.files import (atomic_directory, atomic_write_bytes, atomic_write_json, make_folder, read_records,
                          remove_temporaries, reporting_full_disk, sha256_file, write_checksums)
from ..data.manifest import read_manifest
from ..data.shards import TokenBatches, TokenShards, eval_batches
from .checkpoint import (
    full_model_state, is_main_process, list_checkpoints, load_trainer_state, load_weights, newest_good_checkpoint,
    save_checkpoint, save_model_files, saved_settings,
)
from .config import MODEL_PRESETS, TrainConfig
from .distributed import World, close_world, init_world, mean_over_ranks, parallelize, sum_over_ranks
from .optim import build_optimizer, build_scheduler, follow_config


class TrainingDiverged(RuntimeError):
    pass


def diverged(problem: str, step: int, out_dir: Path) -> TrainingDiverged:
    good = newest_good_checkpoint(out_dir)
    return TrainingDiverged(
        f"{problem} at step {step}; nothing was written for this step. "
        + (f"The last good checkpoint (whole, every weight finite) {good} is intact: resume from it with a lower "
           "--optim.lr or a larger --optim.warmup_steps." if good else "Lower --optim.lr and start again."))


def weights_finite(model) -> bool:
    """Whether every parameter is finite on every process: one reduction per tensor and one host sync."""
    local = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    nonfinite = torch.stack([~p.isfinite().all() for p in local]).sum()
    return sum_over_ranks(nonfinite).item() == 0


def run_settings(cfg: TrainConfig) -> dict:
    """What a resumed run must share with its checkpoint: the model, the sequence length, the training data
    (its shards' checksums, wherever the folder now is) and the tokenizer."""
    manifest = read_manifest(cfg.data.path)
    tokenizer_dir = Path(cfg.data.path) / manifest["tokenizer"]["path"]
    tokenizer_files = sorted(tokenizer_dir.iterdir()) if tokenizer_dir.is_dir() else []
    settings = {
        **{f"model.{key}": value for key, value in dataclasses.asdict(cfg.model).items()},
        "data.seq_len": cfg.data.seq_len,
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
            + ". The model, data and tokenizer must stay as the checkpoint has them: resume with its settings, "
              "or start a new run in another --train.out_dir")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _report_damaged(path: Path, problem: str):
    print(f"checkpoint {path} is damaged: {problem}", file=sys.stderr)


def build_model_config(cfg: TrainConfig, vocab_size: int, eos_id: int | None) -> DepthAttentionConfig:
    settings = {**MODEL_PRESETS[cfg.model.preset], **cfg.model.overrides}
    # strides are fractions of the depth actually built, so the method reads the overridden layer count
    settings = {**settings, **method_settings(cfg.model.method, settings["num_hidden_layers"], cfg.model.num_loops),
                **cfg.model.overrides}
    settings.setdefault("vocab_size", vocab_size)
    if settings["vocab_size"] < vocab_size:
        raise ValueError(f"model.overrides.vocab_size={settings['vocab_size']} is smaller than the tokenizer's "
                         f"{vocab_size} ids; drop the override or raise it")
    if cfg.data.seq_len > cfg.model.max_position_embeddings:
        raise ValueError(f"data.seq_len ({cfg.data.seq_len}) exceeds model.max_position_embeddings "
                         f"({cfg.model.max_position_embeddings})")
    return DepthAttentionConfig(max_position_embeddings=cfg.model.max_position_embeddings, eos_token_id=eos_id,
                                **settings)


def autocast_dtype(choice: str, device: torch.device) -> torch.dtype | None:
    if choice == "bfloat16" or (choice == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return None


def lm_loss(model, input_ids: torch.Tensor, labels: torch.Tensor, amp: torch.dtype | None) -> torch.Tensor:
    """Mean next-token cross-entropy; `labels` are already the inputs shifted by one."""
    with torch.autocast(input_ids.device.type, dtype=amp, enabled=amp is not None):
        logits = model(input_ids=input_ids, use_cache=False).logits  # (B, T, V)
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


@torch.no_grad()
def evaluate(model, shards: TokenShards, batch_size: int, seq_len: int, max_batches: int | None, world: World,
             amp=None) -> float:
    """Token-weighted mean loss over the first `max_batches` fixed validation batches of the global batch size:
    the same windows whatever the number of processes, each process taking its slice of each batch."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=world.device)  # loss sum, token count
    for input_ids, labels in eval_batches(shards, batch_size * world.world_size, seq_len, max_batches):
        rows = slice(world.rank * batch_size, (world.rank + 1) * batch_size)
        input_ids, labels = input_ids[rows].to(world.device), labels[rows].to(world.device)
        if len(labels):
            totals += torch.stack([lm_loss(model, input_ids, labels, amp).double() * labels.numel(),
                                   torch.tensor(labels.numel(), dtype=torch.float64, device=world.device)])
    model.train(was_training)
    totals = sum_over_ranks(totals)
    return (totals[0] / totals[1]).item()


class MetricsLog:
    """metrics.jsonl: one JSON record per line, flushed as written; on resume, records after the checkpoint go."""

    def __init__(self, path: Path, enabled: bool, resume_step: int | None):
        self.path, self.enabled = path, enabled
        if enabled and resume_step is not None and path.exists():
            kept = [record for record in read_records(path) if record.get("step", 0) <= resume_step]
            atomic_write_bytes(path, "".join(json.dumps(record) + "\n" for record in kept).encode())
        elif enabled and resume_step is None:
            path.unlink(missing_ok=True)
        self.file = open(path, "a") if enabled else None
        self.writers = []

    def write(self, record: dict):
        if not self.enabled:
            return
        with reporting_full_disk(self.path.parent):
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        for writer in self.writers:
            writer(record)

    def close(self):
        if self.file:
            self.file.close()


def _external_loggers(cfg: TrainConfig, out_dir: Path) -> list:
    writers = []
    if cfg.logging.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("logging.tensorboard needs the tensorboard package: pip install tensorboard") from None
        board = SummaryWriter(out_dir / "tensorboard")
        writers.append(lambda r: [board.add_scalar(k, v, r["step"]) for k, v in r.items() if k != "step"])
    if cfg.logging.wandb:
        try:
            import wandb
        except ImportError:
            raise ImportError("logging.wandb needs the wandb package: pip install wandb") from None
        run = wandb.init(project=cfg.logging.wandb_project, config=cfg.to_dict(), dir=str(out_dir))
        writers.append(lambda r: run.log(r, step=r["step"]))
    return writers


def train(cfg: TrainConfig, resume: bool = False) -> dict:
    """Run (or resume) one training run described by `cfg`; returns a summary of the final metrics."""
    hf_logging.disable_progress_bar()  # checkpoint writes would print a bar each
    world = init_world()
    try:
        return _train(cfg, resume, world)
    finally:
        close_world()


def _train(cfg: TrainConfig, resume: bool, world: World) -> dict:
    t, out_dir = cfg.train, Path(cfg.train.out_dir)
    checkpoints = list_checkpoints(out_dir)
    if checkpoints and not resume:
        raise FileExistsError(f"{out_dir} already holds checkpoints; pass --resume to continue that run, "
                              "or choose another --train.out_dir")
    make_folder(out_dir, "--train.out_dir")
    if world.is_main:  # what a killed run left of its atomic writes
        remove_temporaries(out_dir)
        remove_temporaries(out_dir / "checkpoints")
    settings = run_settings(cfg)
    checkpoint = resume_point(out_dir, settings, world.is_main) if resume else None

    torch.manual_seed(t.seed)
    train_shards = TokenShards(cfg.data.path, "train")
    val_shards = TokenShards(cfg.data.path, "val")
    if world.is_main and not train_shards.tokenizer_path.is_dir():
        print(f"warning: {cfg.data.path} holds no tokenizer ({train_shards.tokenizer_path} is missing), so the "
              "model folders this run writes have none: generate, eval and harness will need --tokenizer DIR",
              file=sys.stderr)
    model = DepthAttentionForCausalLM(build_model_config(cfg, train_shards.vocab_size, train_shards.eos_id))
    if cfg.model.init_from and not checkpoint:
        load_backbone(model, cfg.model.init_from)
    model.to(world.device)
    if checkpoint:
        load_weights(checkpoint, model)
    if t.activation_checkpointing:
        model.activation_checkpointing_enable()
    if t.compile:
        for layer in model.model.layers:
            layer.compile()
    wrapped = parallelize(model, t.parallel, world)
    optimizer = build_optimizer(wrapped, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, t.steps)
    batches = TokenBatches(train_shards, t.batch_size, cfg.data.seq_len, t.seed, world.rank, world.world_size)
    start = 0
    if checkpoint:
        start = load_trainer_state(checkpoint, wrapped, optimizer, scheduler, batches)["step"]
        follow_config(optimizer, scheduler, cfg.optim)
    if world.is_main:
        atomic_write_json(out_dir / "train_config.json", cfg.to_dict())
    amp = autocast_dtype(t.dtype, world.device)
    metrics = MetricsLog(out_dir / "metrics.jsonl", world.is_main, start if checkpoint else None)
    if world.is_main:
        metrics.writers = _external_loggers(cfg, out_dir)

    tokens_per_step = t.batch_size * cfg.data.seq_len * t.grad_accum * world.world_size
    parameters = sum(p.numel() for p in model.parameters())
    if world.is_main:
        print(f"{cfg.model.method}: {parameters:,} parameters, {tokens_per_step:,} tokens per step, "
              f"{world.world_size} process(es) on {world.device}" + (f", resuming after step {start}" if start else ""))
    progress = tqdm(total=t.steps, initial=start, disable=not (t.progress and world.is_main), unit="step",
                    desc=cfg.model.method, dynamic_ncols=True)
    wrapped.train()
    last = {"step": start}
    step_start = time.perf_counter()
    for step in range(start + 1, t.steps + 1):
        loss_sum = torch.zeros((), device=world.device)
        for micro in range(t.grad_accum):
            input_ids, labels = next(batches)
            with _gradient_sync(wrapped, t.parallel, world, last_micro=micro == t.grad_accum - 1):
                loss = lm_loss(wrapped, input_ids.to(world.device), labels.to(world.device), amp)
                (loss / t.grad_accum).backward()
            loss_sum += loss.detach()
        loss = mean_over_ranks(loss_sum / t.grad_accum).item()
        if not math.isfinite(loss):
            raise diverged(f"the training loss became {loss}", step, out_dir)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(wrapped.parameters(), cfg.optim.grad_clip or float("inf")))
        if not math.isfinite(grad_norm):
            raise diverged(f"the gradient norm became {grad_norm}", step, out_dir)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        checkpoint_due = step % t.checkpoint_every == 0 or step == t.steps
        if checkpoint_due and not weights_finite(model):  # a checkpoint (and so the export) is only ever finite
            raise diverged("some weights became NaN or infinite", step, out_dir)

        elapsed = time.perf_counter() - step_start
        step_start = time.perf_counter()
        record = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                  "tokens": step * tokens_per_step, "tokens_per_s": tokens_per_step / elapsed}
        if step % t.eval_every == 0 or step == t.steps:
            val_loss = evaluate(wrapped, val_shards, t.batch_size, cfg.data.seq_len, t.eval_batches, world, amp)
            record.update(val_loss=val_loss, val_ppl=math.exp(val_loss))
        metrics.write(record)
        last = {**last, **record}
        progress.update(1)
        progress.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{record['tokens_per_s']:,.0f}",
                             **({"val": f"{record['val_loss']:.3f}"} if "val_loss" in record else {}))
        if world.is_main and not t.progress and (step % t.log_every == 0 or "val_loss" in record):
            print(f"{cfg.model.method} step {step}/{t.steps}: loss {loss:.4f}, lr {lr:.2e}, "  # for logs without a bar
                  f"{record['tokens_per_s']:,.0f} tok/s" + (f", val {record['val_loss']:.4f}" if "val_loss" in record else ""),
                  flush=True)
        if checkpoint_due:
            save_checkpoint(out_dir, step, wrapped, model, optimizer, scheduler, batches, t.keep_checkpoints,
                            {"loss": loss}, settings, train_shards.tokenizer_path)
    progress.close()
    metrics.close()
    # the weights were checked before the last step's checkpoint (or, with no step left, are a checked checkpoint's)
    export(wrapped, model, out_dir / "final", train_shards.tokenizer_path)
    return last


def _gradient_sync(model, parallel: str, world: World, last_micro: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of a step."""
    if world.world_size == 1:
        return contextlib.nullcontext()
    if parallel == "ddp":
        return contextlib.nullcontext() if last_micro else model.no_sync()
    model.set_requires_gradient_sync(last_micro)
    return contextlib.nullcontext()


def export(model, unwrapped, path: Path, tokenizer_path: Path | None):
    """A Hugging Face folder (config, safetensors weights, tokenizer) that AutoModelForCausalLM loads.

    Every rank calls this (gathering shards is collective); the main process writes.
    """
    state = full_model_state(model)
    if not is_main_process():
        return
    with atomic_directory(path) as tmp:
        save_model_files(tmp, unwrapped, state, tokenizer_path)
        write_checksums(tmp)
