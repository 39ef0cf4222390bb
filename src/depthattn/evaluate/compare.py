"""`depthattn compare`: train methods x seeds on the same data, evaluate each, and report with uncertainty.

Every cell (method, seed) is an ordinary training run in `out_dir/<method>/seed_<s>/`; a cell whose
`result.json` exists is finished and never rerun, an interrupted one resumes from its last checkpoint.
Cells with the same seed share the data order, so differences to the baseline are paired by seed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..data.files import atomic_write_bytes, atomic_write_json
from ..data.shards import TokenShards
from ..methods import count_parameters
from ..presets import PRESETS
from ..train import TrainConfig, evaluate, train
from ..train.distributed import World
from .loading import load_model
from .plots import read_metrics, save_figure

RESULT = "result.json"


@dataclass
class Grid:
    methods: list[str]
    seeds: list[int]
    out_dir: str
    baseline: str = "vanilla"
    base: dict = field(default_factory=dict)  # a training config applied to every cell

    @classmethod
    def load(cls, path: str | Path) -> "Grid":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"comparison grid {path} does not exist; see configs/compare/")
        data = tomllib.loads(path.read_text())
        unknown = set(data) - {"grid", "base"}
        if unknown:
            raise ValueError(f"{path}: unknown sections {sorted(unknown)}; a grid has [grid] and [base.*]")
        grid = data.get("grid", {})
        unknown = set(grid) - {"methods", "seeds", "out_dir", "baseline"}
        if unknown:
            raise ValueError(f"{path}: unknown [grid] keys {sorted(unknown)}; known: methods, seeds, out_dir, baseline")
        try:
            result = cls(base=data.get("base", {}), **grid)
        except TypeError as error:
            raise ValueError(f"{path}: [grid] needs methods, seeds and out_dir ({error})") from None
        return result.check()

    def check(self) -> "Grid":
        for method in self.methods:
            if method not in PRESETS:
                raise ValueError(f"grid method {method!r} is not a preset; choose from {', '.join(PRESETS)}")
        if self.baseline not in self.methods:
            raise ValueError(f"the baseline {self.baseline!r} must be one of the grid's methods {self.methods}")
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise ValueError(f"grid seeds must be distinct and non-empty, got {self.seeds}")
        return self

    def cell_config(self, method: str, seed: int) -> TrainConfig:
        data = json.loads(json.dumps(self.base))  # a deep copy
        data.setdefault("model", {})["method"] = method
        train = data.setdefault("train", {})
        train.update(seed=seed, out_dir=str(Path(self.out_dir) / method / f"seed_{seed}"))
        return TrainConfig.from_dict(data, source=f"grid cell {method}/seed_{seed}")


def run_cell(grid: Grid, method: str, seed: int) -> dict:
    """Train (or resume) one cell and evaluate it on the whole validation split; returns its result."""
    cfg = grid.cell_config(method, seed)
    cell = Path(cfg.train.out_dir)
    if (cell / RESULT).exists():
        return json.loads((cell / RESULT).read_text())
    started = time.perf_counter()
    train(cfg, resume=True)
    # from the metrics log, which a resumed run keeps whole (a run resumed at its last step trains nothing)
    steps = [r for r in read_metrics(cell / "metrics.jsonl") if "tokens_per_s" in r]
    model = load_model(cell / "final")
    val = TokenShards(cfg.data.path, "val")
    world = World(device=next(model.parameters()).device)
    val_loss = evaluate(model, val, cfg.train.batch_size, cfg.data.seq_len, max_batches=None, world=world)
    result = {
        "method": method, "seed": seed, "val_loss": val_loss, "val_ppl": math.exp(val_loss),
        "val_tokens": len(val), "train_tokens": steps[-1]["tokens"],
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
        **{f"params_{k}": v for k, v in count_parameters(model).items()},
        "seconds": time.perf_counter() - started,
    }
    atomic_write_json(cell / RESULT, result)
    return result


def paired_difference(values: list[float], baseline: list[float]) -> dict:
    """Mean and standard deviation of method - baseline over seeds, and a two-sided paired t-test."""
    diffs = [a - b for a, b in zip(values, baseline)]
    out = {"diff_mean": statistics.fmean(diffs), "diff_std": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
           "p_value": math.nan, "wins": sum(d < 0 for d in diffs)}
    if len(diffs) > 1 and out["diff_std"] > 0:
        try:
            from scipy.stats import ttest_rel
        except ImportError:
            raise ImportError("the paired test needs scipy: pip install 'depthattn[analysis]'") from None
        out["p_value"] = float(ttest_rel(values, baseline).pvalue)
    return out


def summarize(grid: Grid, results: list[dict]) -> list[dict]:
    by_method = {m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"]) for m in grid.methods}
    base = by_method[grid.baseline]
    rows = []
    for method, runs in by_method.items():
        losses = [r["val_loss"] for r in runs]
        row = {
            "method": method, "seeds": len(runs), "val_loss_mean": statistics.fmean(losses),
            "val_loss_std": statistics.stdev(losses) if len(losses) > 1 else 0.0,
            "val_ppl_mean": statistics.fmean(r["val_ppl"] for r in runs),
            "params": runs[0]["params_total"], "extra_params": runs[0]["params_extra_over_vanilla"],
            "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in runs),
        }
        if method != grid.baseline:
            row.update(paired_difference(losses, [r["val_loss"] for r in base]))
        rows.append(row)
    return rows


def markdown_table(rows: list[dict], baseline: str) -> str:
    lines = [
        f"| method | seeds | val loss (mean ± sd) | val ppl | Δ loss vs {baseline} (mean ± sd) | paired t-test p "
        f"| seeds better | parameters | extra | train tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff = (f"{r['diff_mean']:+.4f} ± {r['diff_std']:.4f}", f"{r['p_value']:.3f}", f"{r['wins']}/{r['seeds']}") \
            if "diff_mean" in r else ("—", "—", "—")
        lines.append(f"| {r['method']} | {r['seeds']} | {r['val_loss_mean']:.4f} ± {r['val_loss_std']:.4f} | "
                     f"{r['val_ppl_mean']:.2f} | {diff[0]} | {diff[1]} | {diff[2]} | {r['params']:,} | "
                     f"{r['extra_params']:,} | {r['tokens_per_s']:,.0f} |")
    return "\n".join(lines) + "\n"


def csv_text(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def plot_validation_curves(grid: Grid, out_png: Path) -> Path:
    """Validation loss against tokens: the mean over seeds per method, with the seeds' range shaded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'depthattn[analysis]'") from None

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, method in enumerate(grid.methods):
        curves = [[r for r in read_metrics(Path(grid.out_dir) / method / f"seed_{s}" / "metrics.jsonl")
                   if "val_loss" in r] for s in grid.seeds]
        tokens = [r["tokens"] for r in curves[0]]
        values = list(zip(*[[r["val_loss"] for r in c] for c in curves]))  # per eval point, one per seed
        ax.plot(tokens, [statistics.fmean(v) for v in values], "o-", color=f"C{i}", ms=3, label=method)
        ax.fill_between(tokens, [min(v) for v in values], [max(v) for v in values], color=f"C{i}", alpha=0.15)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats / token)")
    ax.set_title(f"mean over {len(grid.seeds)} seeds, shaded: min-max")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, out_png)


def compare(grid: Grid) -> list[dict]:
    out_dir = Path(grid.out_dir)
    cells = [(m, s) for s in grid.seeds for m in grid.methods]  # seed-major: early results cover every method
    results = []
    for i, (method, seed) in enumerate(cells, start=1):
        print(f"[{i}/{len(cells)}] {method}, seed {seed}")
        results.append(run_cell(grid, method, seed))
    rows = summarize(grid, results)
    atomic_write_bytes(out_dir / "results.md", markdown_table(rows, grid.baseline).encode())
    atomic_write_bytes(out_dir / "results.csv", csv_text(rows).encode())
    atomic_write_json(out_dir / "results.json", {"rows": rows, "cells": results})
    plot_validation_curves(grid, out_dir / "val_loss.png")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="a comparison grid (see configs/compare/)")
    parser.add_argument("--methods", nargs="+", help="run only these methods of the grid")
    parser.add_argument("--seeds", nargs="+", type=int, help="run only these seeds of the grid")


def run(args: argparse.Namespace) -> int:
    grid = Grid.load(args.config)
    if args.methods:
        grid.methods = [m for m in grid.methods if m in args.methods] or args.methods
    if args.seeds:
        grid.seeds = args.seeds
    grid.check()
    started = time.perf_counter()
    rows = compare(grid)
    print("\n" + markdown_table(rows, grid.baseline))
    print(f"results in {grid.out_dir}/results.md, results.csv, val_loss.png ({time.perf_counter() - started:.0f} s)")
    return 0
