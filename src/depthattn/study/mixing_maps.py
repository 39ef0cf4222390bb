"""Why the methods of a study differ: depth-weight maps and learned mixing weights of its seed-0 models."""

from __future__ import annotations

import itertools
from pathlib import Path

from ..evaluate.depth_map import compute_depth_map, step_sources
from ..evaluate.plots import plot_depth_map, save_figure
from ..files import atomic_write_json
from ..loading import load_model
from .records import Cell
from .spec import Study, setting_label


def explain(study: Study, seed: int = 0) -> Path:
    """Why the methods differ, for each setting's seed-`seed` models (read from out_dir): the depth-weight map of
    every method that has one (`depthattn.evaluate.depth_map`) and the learned mixing weights of the other methods
    that have them (`CrossLayerMethod.layer_mixing`), per layer, in <results>/<name>_why.*."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = Path(study.results)
    found: dict[str, dict[str, dict]] = {}
    for setting in study.settings():
        label = setting_label(setting) or "base"
        for method in study.methods:
            cell = Cell(setting, method, seed)
            final = study.run_dir(cell) / "final"
            if not (final / "model.safetensors").exists():
                continue
            data = study.cell_config(cell).data
            model = load_model(final, device="cpu")
            if _has_depth_weights(model):
                result = compute_depth_map(final, data.path, samples=32, seq_len=data.seq_len, device="cpu")
                found.setdefault(label, {})[method] = {"depth_map": result["matrix"], "sources": result["sources"]}
                plot_depth_map(result["matrix"], root / f"{study.name}_why_{method}_{label}.png", title=(
                    f"{method}, {label}, seed {seed}: mean depth weight (row: layer, column: source)"))
            elif mixing := model.model.cross_layer.layer_mixing():
                found.setdefault(label, {})[method] = {"mixing": mixing}
    if not found:
        raise FileNotFoundError(f"no seed-{seed} models of study {study.name} under {study.out_dir}; "
                                "run the study first")
    for label, methods in found.items():
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for i, (method, info) in enumerate(methods.items()):
            if "mixing" in info:
                for (name, weights), style in zip(info["mixing"].items(), itertools.cycle(("s-", "s--", "s:"))):
                    ax.plot(range(1, len(weights) + 1), weights, style, color=f"C{i}", label=f"{method} {name}")
            else:
                matrix = info["depth_map"]
                layers = range(1, len(matrix))
                ax.plot(layers, [matrix[layer][0] for layer in layers], "o-", color=f"C{i}",
                        label=f"{method}: weight on layer 0")
                ax.plot(layers, [matrix[layer][layer] for layer in layers], "o:", color=f"C{i}",
                        label=f"{method}: own value")
        ax.set_xlabel("layer")
        ax.set_ylabel("mean weight / learned lambda")
        ax.set_title(f"{study.title}: {label}, seed {seed}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, root / f"{study.name}_why_{label}.png")
    atomic_write_json(root / f"{study.name}_why.json", {"seed": seed, "settings": found})
    return root / f"{study.name}_why.json"


def _has_depth_weights(model) -> bool:
    """Whether `depthattn.evaluate.depth_map` can map the model: it refuses, with a ValueError, a model whose
    method weighs no depth sources."""
    try:
        step_sources(model)
    except ValueError:
        return False
    return True
