"""AdamW with decoupled weight decay on matrices only, and a cosine schedule with warmup."""

from __future__ import annotations

import math

import torch

from .config import OptimSection


def build_optimizer(model: torch.nn.Module, optim: OptimSection) -> torch.optim.AdamW:
    """Weight decay on matrices; none on norms, biases and scalar or vector mixing weights (ndim < 2)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=optim.eps,
                             fused=torch.cuda.is_available() and next(model.parameters()).is_cuda)


def lr_factor(step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warmup to 1, then cosine decay to min_lr_ratio at total_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer, optim: OptimSection, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps, optim.warmup_steps, optim.min_lr_ratio))


def follow_config(optimizer, scheduler, optim: OptimSection):
    """After loading a checkpoint: this config's AdamW settings and peak lr replace the saved ones (they may
    change on resume, e.g. a lower lr after a divergence); the position in the schedule is kept."""
    for group, weight_decay in zip(optimizer.param_groups, (optim.weight_decay, 0.0)):
        group.update(betas=(optim.beta1, optim.beta2), eps=optim.eps, weight_decay=weight_decay)
        group["lr"] = optim.lr * scheduler.lr_lambdas[0](scheduler.last_epoch)
    scheduler.base_lrs = [optim.lr] * len(optimizer.param_groups)
