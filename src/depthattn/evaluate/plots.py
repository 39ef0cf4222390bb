"""Plots (need the `plot` extra: matplotlib): loss curves from metrics.jsonl files, depth-weight maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..files import AtomicFile
from ..run_metrics import metrics_file, read_metrics


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no window), or an ImportError naming the extra to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'depthattn[plot]'") from None
    return plt


def plot_loss_curves(runs: dict[str, str | Path], out_png: str | Path, title: str = "", lr: bool = False) -> Path:
    """One line per run for the training loss (thin) and validation loss (markers) against tokens seen; with `lr`, a
    second panel of the learning rate. `runs`: name -> a run's folder or its metrics.jsonl."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if lr else 1, figsize=(12 if lr else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    for i, (name, run) in enumerate(runs.items()):
        path = metrics_file(run)
        records = read_metrics(path)
        if without := [n for n, r in enumerate(records, 1) if "tokens" not in r]:
            raise ValueError(f"{path}: {len(without)} of its records (the first: record {without[0]}) have no "
                             "'tokens': it is not a metrics.jsonl that depthattn train wrote")
        color = f"C{i}"
        # not the step-0 record (val_loss only) of a run started from a model
        steps = [r for r in records if "loss" in r]
        ax.plot([r["tokens"] for r in steps], [r["loss"] for r in steps], color=color, alpha=0.35, lw=1)
        val = [r for r in records if "val_loss" in r]
        ax.plot([r["tokens"] for r in val], [r["val_loss"] for r in val], "o-", color=color, label=f"{name} (val)")
        if lr:
            axes[0][1].plot([r["tokens"] for r in steps], [r["lr"] for r in steps], color=color, label=name)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title or "training (thin) and validation (markers) loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if lr:
        axes[0][1].set_xlabel("training tokens")
        axes[0][1].set_ylabel("learning rate")
        axes[0][1].grid(alpha=0.3)
        axes[0][1].legend()
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_depth_map(matrix, out_png: str | Path, present=None, title: str = "",
                   loop_length: int | None = None) -> Path:
    """Heatmap of a (target layer x source layer) depth-weight matrix with every present value written in its cell.

    `present`: boolean mask of the cells that exist (a layer's sources and itself); the others stay blank.
    `loop_length`: for a looped model, draw lines between loops every `loop_length` steps."""
    plt = pyplot()
    matrix = np.asarray(matrix, dtype=float)
    depth = len(matrix)
    present = np.ones_like(matrix, dtype=bool) if present is None else np.asarray(present, dtype=bool)
    shown = np.ma.masked_where(~present, matrix)
    size = min(12.0, 2.5 + 0.45 * depth)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    low, high = float(min(0.0, shown.min())), float(max(1.0, shown.max()))  # a linear mix's weights leave [0, 1]
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    image = ax.imshow(shown, cmap=cmap, vmin=low, vmax=high, origin="upper")
    if depth <= 32:  # values stay readable up to about 32 layers
        fontsize = max(4.0, min(9.0, 160 / depth))
        for i in range(depth):
            for j in range(depth):
                if present[i, j]:
                    ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=fontsize,
                            color="black" if matrix[i, j] > low + 0.6 * (high - low) else "white")
    if loop_length:
        for edge in range(loop_length, depth, loop_length):
            ax.axhline(edge - 0.5, color="red", lw=0.8)
            ax.axvline(edge - 0.5, color="red", lw=0.8)
    ticks = range(0, depth, max(1, depth // 16))
    ax.set_xticks(list(ticks))
    ax.set_yticks(list(ticks))
    ax.set_xlabel("source layer")
    ax.set_ylabel("target layer")
    ax.set_title(title or "mean depth-attention weight (diagonal: own value)")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="mean weight")
    fig.tight_layout()
    return save_figure(fig, out_png)


def save_figure(fig, out_png: str | Path) -> Path:
    """Write a PNG atomically (temporary name, fsync, rename), so a crash never leaves half a file."""
    import matplotlib.pyplot as plt

    out_png = Path(out_png)
    try:
        with AtomicFile(out_png) as file:
            fig.savefig(file.file, format="png", dpi=120)
    finally:
        plt.close(fig)
    return out_png
