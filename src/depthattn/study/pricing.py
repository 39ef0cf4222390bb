"""What a study's cells cost before they run: training FLOPs from the tokens and the model, and GPU-hours at a
stated model FLOPs utilisation (MFU).

Per trained token, forward: 2 FLOPs per weight of the decoder and the output head (input embeddings are a lookup),
plus causal attention, 2 x (QK^T and AV) x seq_len / 2 positions on average x Hq x head_dim per layer, plus the
cross-layer method's own arithmetic (`depthattn.evaluate.costs`). Training is 3 x the forward (backward = 2 x).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ..data.manifest import MANIFEST_NAME
from ..evaluate.costs import method_costs
from ..train.config import build_model_config
from .records import Cell
from .spec import Study
from .store import CellStore

H100_BF16_TFLOPS = 989.0  # dense bf16 peak of an H100 SXM


def _vocab_size(study: Study, data_path: str) -> int:
    manifest = Path(data_path) / MANIFEST_NAME
    if manifest.exists():
        return json.loads(manifest.read_text())["tokenizer"]["vocab_size"]
    return study.datasets.get(data_path, {}).get("vocab_size", 50304)


def cell_flops(study: Study, setting: Mapping[str, str], method: str) -> dict:
    """Training tokens, parameters (`params` every one, `params_non_embedding` without the input embedding and the
    output head: the field's count) and FLOPs of one cell (any seed)."""
    cfg = study.cell_config(Cell(setting, method, study.seeds[0]))
    config = build_model_config(cfg, _vocab_size(study, cfg.data.path), None)
    costs = method_costs(config)
    D, L, T = config.hidden_size, config.unrolled_depth, cfg.data.seq_len
    embeddings = config.vocab_size * D
    weights = costs["params_total"] - (0 if config.tie_word_embeddings else embeddings)  # the head is a matmul
    # head_dim: None only before the config's __post_init__, which sets it from hidden_size
    attention = 2 * L * T * config.num_attention_heads * config.head_dim  # type: ignore[operator]
    forward = 2 * weights + attention + costs["extra_flops_per_token"]
    tokens = cfg.train.steps * cfg.train.batch_size * cfg.train.grad_accum * T
    tables = embeddings * (1 if config.tie_word_embeddings else 2)
    return {"tokens": tokens, "params": costs["params_total"], "params_non_embedding": costs["params_total"] - tables,
            "flops": 3 * forward * tokens}


def run_flops(study: Study, setting: Mapping[str, str], method: str) -> dict:
    """`cell_flops` of the run that trains `setting`'s cell: with a branched budget axis the longest budget's run
    plus the decay of each shorter branch, beside the FLOPs of training every budget as a run of its own."""
    run = cell_flops(study, setting, method)
    budgets = [cell_flops(study, s, method) for s in study.budget_settings(setting, method)]
    if study.branch_axis is None:
        return {**run, "separate_flops": run["flops"]}
    optim = study.cell_config(Cell(setting, method, study.seeds[0])).optim
    decays = sum(b["flops"] * optim.decay_steps(steps) / steps for b, steps in (
        (b, study.cell_config(Cell(s, method, study.seeds[0])).train.steps)
        for b, s in zip(budgets, study.budget_settings(setting, method), strict=True)) if b["tokens"] < run["tokens"])
    return {**run, "flops": run["flops"] + decays, "separate_flops": sum(b["flops"] for b in budgets)}


def tokens_left(study: Study, store: CellStore, cell: Cell, resumes_at: int) -> int:
    """Training tokens the run that trains `cell` has left after step `resumes_at`: its own steps and, with a
    branched budget axis, the decay of every shorter budget of the run that has no result in `store` yet."""
    cfg = study.cell_config(cell)
    steps = cfg.train.steps - resumes_at
    for budget in study.budget_settings(cell.setting, cell.method):
        branch = Cell(budget, cell.method, cell.seed)
        branch_steps = study.cell_config(branch).train.steps
        if branch_steps < cfg.train.steps and not store.is_settled(study, branch):
            steps += cfg.optim.decay_steps(branch_steps)
    return steps * cfg.train.batch_size * cfg.train.grad_accum * cfg.data.seq_len


def model_flops_utilisation(study: Study, setting: dict, method: str, tokens_per_s: float,
                            peak_tflops: float = H100_BF16_TFLOPS) -> float:
    """The share of `peak_tflops` that training `method` in `setting` at `tokens_per_s` reaches, from the cell's
    FLOPs per token (`cell_flops`)."""
    flops = cell_flops(study, setting, method)
    return tokens_per_s * flops["flops"] / flops["tokens"] / (peak_tflops * 1e12)


def gpu_hours(flops: float, mfu: float, peak_tflops: float = H100_BF16_TFLOPS) -> float:
    return flops / (mfu * peak_tflops * 1e12) / 3600
