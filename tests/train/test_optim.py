import math

import pytest
import torch

from depthattn.train.config import OptimSection
from depthattn.train.optim import build_optimizer, build_scheduler, lr_factor
from tests.helpers import tiny_model


def test_schedule_warmup_cosine_floor():
    optim = OptimSection(warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, 100, optim) == pytest.approx(0.1)
    assert lr_factor(9, 100, optim) == pytest.approx(1.0)
    assert lr_factor(10, 100, optim) == pytest.approx(1.0)
    assert lr_factor(55, 100, optim) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(100, 100, optim) == pytest.approx(0.1)
    assert lr_factor(500, 100, optim) == pytest.approx(0.1)


def test_no_weight_decay_on_norms_and_vectors():
    model = tiny_model()
    optimizer = build_optimizer(model, OptimSection(weight_decay=0.1))
    decayed, plain = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(not names[id(p)].endswith("norm.weight") for p in decayed["params"])
    assert {names[id(p)] for p in plain["params"]} == {n for n, p in model.named_parameters() if p.ndim < 2}
    assert betas_of(optimizer) == (0.9, 0.95)


def betas_of(optimizer):
    return optimizer.param_groups[0]["betas"]


def test_scheduler_drives_the_lr():
    model = tiny_model()
    optimizer = build_optimizer(model, OptimSection(lr=1e-3, warmup_steps=2))
    scheduler = build_scheduler(optimizer, OptimSection(lr=1e-3, warmup_steps=2), total_steps=10)
    lrs = []
    for _ in range(4):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(5e-4) and lrs[1] == lrs[2] == pytest.approx(1e-3) and lrs[3] < lrs[2]
    assert torch.is_tensor(model.lm_head.weight)
