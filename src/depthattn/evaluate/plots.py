"""Loss-curve plots from metrics.jsonl files (needs the `plot` extra: matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_loss_curves(runs: dict[str, str | Path], out_png: str | Path, title: str = "") -> Path:
    """One line per run for the training loss (thin) and validation loss (markers) against tokens seen."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'depthattn[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, metrics_path) in enumerate(runs.items()):
        records = read_metrics(metrics_path)
        color = f"C{i}"
        ax.plot([r["tokens"] for r in records], [r["loss"] for r in records], color=color, alpha=0.35, lw=1)
        val = [r for r in records if "val_loss" in r]
        ax.plot([r["tokens"] for r in val], [r["val_loss"] for r in val], "o-", color=color, label=f"{name} (val)")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title or "training (thin) and validation (markers) loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_png = Path(out_png)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
