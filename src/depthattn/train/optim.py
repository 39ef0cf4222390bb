"""AdamW with decoupled weight decay on matrices only, and the learning-rate schedules: cosine, and
warmup-stable-decay (WSD), whose constant phase lets one run branch a short decay off at any budget.

WSD follows Hu et al. 2024 (MiniCPM, arXiv 2404.06395) and Hägele et al. 2024 ("Scaling Laws and Compute-Optimal
Training Beyond Fixed Training Durations", arXiv 2405.18392): linear warmup, then the peak rate, then a decay over
the last `decay_fraction` of the run, shaped `linear`, `1-sqrt` (their best) or `cosine`, down to `min_lr_ratio`.
The rate of a step before the decay does not depend on the run's length, so a run of B steps equals a longer run
up to B's decay start (`OptimSection.decay_start`), followed by B's own decay: a cooldown branch (train/branches.py).
"""

from __future__ import annotations

import json
import math

import torch

from .config import OptimSection

DECAY_SHAPES = {
    "linear": lambda progress: 1 - progress,
    "1-sqrt": lambda progress: 1 - math.sqrt(progress),
    "cosine": lambda progress: 0.5 * (1 + math.cos(math.pi * progress)),
}


def build_optimizer(model: torch.nn.Module, optim: OptimSection) -> torch.optim.AdamW:
    """Weight decay on matrices; none on norms, biases and scalar or vector mixing weights (ndim < 2)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=optim.eps,
                             fused=torch.cuda.is_available() and next(model.parameters()).is_cuda)


def lr_factor(step: int, total_steps: int, optim: OptimSection) -> float:
    """The learning rate of optimizer step `step` (0-based) of a run of `total_steps`, as a fraction of the peak:
    linear warmup to 1, then cosine decay to min_lr_ratio at total_steps, or for WSD 1 until the decay starts and
    then the decay shape, reaching min_lr_ratio at the last step."""
    if step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    low = optim.min_lr_ratio
    if optim.schedule == "wsd":
        start = optim.decay_start(total_steps)
        if step < start:
            return 1.0
        progress = min(1.0, (step - start + 1) / optim.decay_steps(total_steps))
        return low + (1 - low) * DECAY_SHAPES[optim.decay_shape](progress)
    progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - optim.warmup_steps))
    return low + (1 - low) * 0.5 * (1 + math.cos(math.pi * progress))


# the optim settings that shape the learning-rate curve; the peak (optim.lr) may change on resume (follow_config)
SCHEDULE_FIELDS = ("schedule", "warmup_steps", "min_lr_ratio", "decay_fraction", "decay_shape")


def schedule_settings(optim: OptimSection) -> dict:
    return {name: getattr(optim, name) for name in SCHEDULE_FIELDS}


def schedule_change(trained: int, planned_steps: int, steps: int, optim: OptimSection,
                    saved: OptimSection | None = None) -> str | None:
    """How resuming after `trained` steps of a run planned for `planned_steps` with the schedule settings of
    `saved` (by default `optim`'s) as a run of `steps` with `optim` changes its learning-rate schedule; None when the
    steps trained so far follow the new schedule too (a WSD run resumed in its stable phase)."""
    saved = saved or optim
    if all(lr_factor(step, planned_steps, saved) == lr_factor(step, steps, optim) for step in range(trained)):
        return None
    was, becomes = (optim.lr * lr_factor(trained - 1, planned_steps, saved),
                    optim.lr * lr_factor(trained, steps, optim))
    jump = (f"the learning rate would go from {was:.2e} at step {trained} to {becomes:.2e} at step "
            f"{trained + 1}")
    changed = [f"optim.{name} = {json.dumps(getattr(saved, name))} (now {json.dumps(getattr(optim, name))})"
               for name in SCHEDULE_FIELDS if getattr(saved, name) != getattr(optim, name)]
    if not changed:
        return (f"its {optim.schedule} schedule was laid out for {planned_steps} steps, so its {trained} steps are "
                f"not the start of a {steps}-step run: {jump}")
    length = f" in a run of {planned_steps} steps" if planned_steps != steps else ""
    return (f"its {trained} steps followed {' and '.join(changed)}{length}, so they are not the start of the new "
            f"{steps}-step {optim.schedule} schedule: {jump}")


def build_scheduler(optimizer, optim: OptimSection, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, optim))


def follow_config(optimizer, scheduler, optim: OptimSection):
    """After loading a checkpoint: this config's AdamW settings and peak lr replace the saved ones (they may
    change on resume, e.g. a lower lr after a divergence); the position in the schedule is kept, and the rate is
    this run's schedule there (a cooldown branch resumes a longer run's checkpoint with its own, shorter one)."""
    for group, weight_decay in zip(optimizer.param_groups, (optim.weight_decay, 0.0), strict=True):
        group.update(betas=(optim.beta1, optim.beta2), eps=optim.eps, weight_decay=weight_decay)
        group["lr"] = optim.lr * scheduler.lr_lambdas[0](scheduler.last_epoch)
    scheduler.base_lrs = [optim.lr] * len(optimizer.param_groups)
