"""A training run's metrics file (metrics.jsonl): its name, where a run keeps it, how to read it back.

train/metrics.py writes it; the loss-curve plots (evaluate/plots.py), a study's cells and the demo read it. It lives
here rather than beside its writer in train/ because its readers must not import the trainer: a study's report
draws through evaluate/plots.py and imports nothing from train/ (tests/study/test_report_imports.py).
"""

from __future__ import annotations

from pathlib import Path

from .files import read_records

METRICS_FILE = "metrics.jsonl"  # in the run's folder (train.out_dir): one JSON record per line


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a metrics.jsonl (a torn last line dropped), or an error naming the file and the bad line."""
    return read_records(path)


def metrics_file(run: str | Path) -> Path:
    """A run's metrics.jsonl, given the file or the run's folder."""
    path = Path(run)
    path = path / METRICS_FILE if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{run} holds no metrics.jsonl: pass a training run's folder (train.out_dir) or its "
                                "metrics.jsonl")
    return path
