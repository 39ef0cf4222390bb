"""Evaluation and analysis: loss curves, perplexity, downstream tasks, costs, depth-weight maps.

- perplexity.py (`depthattn eval`): loss, perplexity and bits per byte on token shards or text, in fixed blocks
  or a sliding window.
- harness.py (`depthattn harness`): lm-eval tasks (the paper's eight as the task set `paper8`, and offline tasks
  built from the embedded corpus in tasks/) through lm-eval's own HFLM and simple_evaluate.
- depth_map.py (`depthattn depth-map`): the mean depth-attention weight of every (target, source) layer pair.
- costs.py (`depthattn costs`); plots.py draws loss curves and depth maps.
The names below load at their first use (PEP 562), so a submodule (costs.py, for `depthattn costs --help`) imports
none of the others. lm-eval is imported only when a harness function runs (the `eval` extra); plots need matplotlib
(`plot`).
"""

from ..lazy import lazy_names
from ..run_metrics import read_metrics  # light; it lives with the metrics file it reads (depthattn.run_metrics)

_LAZY = {  # public name: the module that defines it, imported at its first use
    "compute_depth_map": "depth_map",
    "depth_weight_map": "depth_map",
    "write_depth_map": "depth_map",
    "LOCAL_TASKS": "harness",
    "PAPER8": "harness",
    "TASK_SETS": "harness",
    "harness_evaluate": "harness",
    "run_harness": "harness",
    "TokenStream": "perplexity",
    "compute_perplexity": "perplexity",
    "evaluate_perplexity": "perplexity",
    "window_spans": "perplexity",
    "plot_depth_map": "plots",
    "plot_loss_curves": "plots",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
__all__ = ["read_metrics", *sorted(_LAZY)]
