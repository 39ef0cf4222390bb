"""A training run's metrics file (metrics.jsonl): its name, where a run keeps it, how to read it back.

train/metrics.py writes it; the loss-curve plots (evaluate/plots.py), a study's cells and the demo read it. It lives
here rather than beside its writer in train/ because its readers must not import the trainer: a study's report
draws through evaluate/plots.py and imports nothing from train/ (tests/study/test_report_imports.py).
"""

from __future__ import annotations

import json
from pathlib import Path

METRICS_FILE = "metrics.jsonl"  # in the run's folder (train.out_dir): one JSON record per line


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a metrics.jsonl, or an error naming the file and the line that is not one."""
    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not a metrics.jsonl: not UTF-8 text ({error.reason} at byte {error.start})") \
            from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} line {number} is not JSON ({error.msg}): a run killed mid-write leaves a cut "
                             "last line; delete that line") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number} is a JSON {type(record).__name__}, not a record (an object): "
                             "is this a training run's metrics.jsonl?")
        records.append(record)
    return records


def metrics_file(run: str | Path) -> Path:
    """A run's metrics.jsonl, given the file or the run's folder."""
    path = Path(run)
    path = path / METRICS_FILE if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{run} holds no metrics.jsonl: pass a training run's folder (train.out_dir) or its "
                                "metrics.jsonl")
    return path
