"""One training step (forward, backward, clipping, AdamW), the validation loss, and what stops a diverged run:
a loss, gradient norm or weight that is NaN or infinite."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from ..data.shards import TokenShards, eval_batches
from .checkpoint import newest_good_checkpoint
from .config import TrainConfig
from .distributed import World, mean_over_ranks, sum_over_ranks


class TrainingDiverged(RuntimeError):
    pass


def diverged(problem: str, step: int, out_dir: Path) -> TrainingDiverged:
    good = newest_good_checkpoint(out_dir)
    return TrainingDiverged(
        f"{problem} at step {step}; nothing was written for this step. "
        + (f"The last good checkpoint (whole, every weight finite) {good} is intact: resume from it with a lower "
           "--optim.lr or a larger --optim.warmup_steps." if good else "Lower --optim.lr and start again."))


def autocast_dtype(choice: str, device: torch.device) -> torch.dtype | None:
    if choice == "bfloat16" or (choice == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return None


def lm_loss(model, input_ids: torch.Tensor, labels: torch.Tensor, amp: torch.dtype | None) -> torch.Tensor:
    """Mean next-token cross-entropy; `labels` are already the inputs shifted by one."""
    with torch.autocast(input_ids.device.type, dtype=amp, enabled=amp is not None):
        logits = model(input_ids=input_ids, use_cache=False).logits  # (B, T, V)
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def train_step(step: int, model, batches, optimizer, scheduler, cfg: TrainConfig, world: World,
               amp: torch.dtype | None) -> dict:
    """`grad_accum` micro-batches, then one clipped AdamW step; returns the mean loss over every process, the
    gradient norm before clipping and the lr the step used. A non-finite loss or gradient norm stops the run
    before the optimizer takes the step."""
    t, out_dir = cfg.train, Path(cfg.train.out_dir)
    loss_sum = torch.zeros((), device=world.device)
    for micro in range(t.grad_accum):
        input_ids, labels = next(batches)
        with _gradient_sync(model, t.parallel, world, last_micro=micro == t.grad_accum - 1):
            micro_loss = lm_loss(model, input_ids.to(world.device), labels.to(world.device), amp)
            (micro_loss / t.grad_accum).backward()
        loss_sum += micro_loss.detach()
    loss = mean_over_ranks(loss_sum / t.grad_accum).item()
    if not math.isfinite(loss):
        raise diverged(f"the training loss became {loss}", step, out_dir)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip or float("inf")))
    if not math.isfinite(grad_norm):
        raise diverged(f"the gradient norm became {grad_norm}", step, out_dir)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss, "lr": lr, "grad_norm": grad_norm}


def _gradient_sync(model, parallel: str, world: World, last_micro: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of a step."""
    if world.world_size == 1:
        return contextlib.nullcontext()
    if parallel == "ddp":
        return contextlib.nullcontext() if last_micro else model.no_sync()
    model.set_requires_gradient_sync(last_micro)
    return contextlib.nullcontext()


def check_weights_finite(model, step: int, out_dir: Path):
    """Stop the run if a weight became NaN or infinite: a checkpoint (and so the export) is only ever finite.
    One reduction per tensor and one host sync, on every process."""
    local = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    nonfinite = torch.stack([~p.isfinite().all() for p in local]).sum()
    if sum_over_ranks(nonfinite).item() != 0:
        raise diverged("some weights became NaN or infinite", step, out_dir)


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
