"""Evaluation and analysis: loss curves, perplexity, downstream tasks, costs, depth-weight maps.

- perplexity.py (`depthattn eval`): loss, perplexity and bits per byte on token shards or text, in fixed blocks
  or a sliding window.
- harness.py (`depthattn harness`): lm-eval tasks (the paper's eight as the task set `paper8`, and offline tasks
  built from the embedded corpus in tasks/) through lm-eval's own HFLM and simple_evaluate.
- depth_map.py (`depthattn depth-map`): the mean depth-attention weight of every (target, source) layer pair.
- costs.py (`depthattn costs`); plots.py draws loss curves and depth maps.
lm-eval is imported only when a harness function runs (the `eval` extra); plots need matplotlib (`plot`).
"""

from .depth_map import compute_depth_map, depth_weight_map, write_depth_map
from .harness import LOCAL_TASKS, PAPER8, TASK_SETS, harness_evaluate, run_harness
from .perplexity import TokenStream, compute_perplexity, evaluate_perplexity, window_spans
from .plots import plot_depth_map, plot_loss_curves, read_metrics

__all__ = [
    "LOCAL_TASKS",
    "PAPER8",
    "TASK_SETS",
    "TokenStream",
    "compute_depth_map",
    "compute_perplexity",
    "depth_weight_map",
    "evaluate_perplexity",
    "harness_evaluate",
    "plot_depth_map",
    "plot_loss_curves",
    "read_metrics",
    "run_harness",
    "window_spans",
    "write_depth_map",
]
