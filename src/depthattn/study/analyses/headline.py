"""The results in one short table (the README's): each method's data multiplier over the baseline at one budget per
sweep, a budget that passes over the data at most once, with its calibrated interval and a verdict Holm-adjusted over
the column's methods (configs/analysis/headline.toml names the columns: a sweep and a budget each).

- A budget sweep's column: the multipliers of its own report (`depthattn.study.multiplier.point`, the calibrated
  interval with the held-out documents' variance where the cells store it); the verdict: **ahead** where the
  Holm-adjusted p-value of the log multiplier (jackknife t) is below 1 - CONFIDENCE and the multiplier is above 1,
  **behind** where below 1, **not shown** otherwise.
- A learning-rate sweep's column is its tuned reading (`depthattn.study.tuning`): each method at its own best rate
  (or its one rate, where the sweep tunes the baseline alone) against the baseline's best-rate envelope, the verdict
  its "survives tuning" (ahead), "reversed" (behind) or "not shown".
- A column whose sweep lacks cells says what its first seed lacks; below MIN_SEEDS seeds it has no interval or verdict.
  Each column says whether its intervals hold the held-out documents' variance too (cells that store each
  document's loss) or the seeds' only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ...train.config import config_path, read_toml
from ..calibrated import holm, holm_verdict, jackknife_p
from ..multiplier import MultiplierPoint, point
from ..spec import Study
from ..store import CellStore
from ..sweep import load_named, one_model
from ..tuning import REFERENCE_RATE, TunedPoint, rate_axis, tuned_multipliers

VERDICTS = ("ahead", "not shown", "behind")  # by the one rule, study/calibrated.py's holm_verdict
TUNED_VERDICTS = {"survives tuning": "ahead", "not shown": "not shown", "reversed": "behind"}  # study/tuning.py's


@dataclass(frozen=True)
class Column:
    """A column of the table: its `label`, the budget sweep it reads and the `budget` (a label of its budget axis)."""

    label: str
    study: Study
    budget: str


@dataclass
class Headline:
    title: str
    columns: list[Column]
    config_file: str

    @property
    def sweeps(self) -> list[Study]:
        return [column.study for column in self.columns]

    @classmethod
    def load(cls, path: str | Path, results: str | None = None) -> Headline:
        path = config_path(path)
        head = read_toml(path, "analysis config", "configs/analysis/").get("headline")
        columns = head.get("columns") if isinstance(head, dict) else None
        if not isinstance(head, dict) or not isinstance(columns, list) or not columns:
            raise ValueError(f"{path}: this analysis has a [headline] table with [[headline.columns]], each with a "
                             "label, a study (a budget sweep's config, relative to this file) and a budget")
        unknown = set(head) - {"title", "columns"}
        if unknown:
            raise ValueError(f"{path}: unknown [headline] keys {sorted(unknown)}; it takes title and columns")
        found = []
        for entry in columns:
            if not isinstance(entry, dict) or set(entry) != {"label", "study", "budget"}:
                raise ValueError(f"{path}: each [[headline.columns]] has exactly label, study and budget; got "
                                 f"{entry!r}")
            study = load_named(path, entry["study"], results)
            axis = study.branch_axis
            if axis is None or entry["budget"] not in axis.values:
                quote = (f' (a label is a string: budget = "{entry["budget"]}")'
                         if axis and str(entry["budget"]) in axis.values else "")
                raise ValueError(f"{path}: column {entry['label']!r}: {study.config_file} has no branched budget "
                                 f"{entry['budget']!r}" + (f"; its budgets: {', '.join(axis.values)}" if axis else "")
                                 + quote)
            rates = rate_axis(study)
            if len(study.axes) > 1 + (rates is not None):
                raise ValueError(f"{path}: column {entry['label']!r}: {study.config_file} has axes besides its budget "
                                 "(and a learning-rate axis); a column reads one model")
            if rates is not None and REFERENCE_RATE not in rates.values:
                raise ValueError(f"{path}: column {entry['label']!r}: {study.config_file}'s rates lack "
                                 f"{REFERENCE_RATE}, the untuned sweeps' rate that the tuned reading compares with")
            if entry["budget"] in axis.baseline_only:
                raise ValueError(f"{path}: column {entry['label']!r}: only the baseline trains budget "
                                 f"{entry['budget']!r} of {study.config_file} (its curve's end); choose a budget every "
                                 "method trains")
            found.append(Column(entry["label"], study, entry["budget"]))
        return cls(head.get("title", path.stem), found, str(path))


@dataclass(frozen=True)
class Cell:
    """A method's multiplier in a column, as its sweep's report reads it (a budget sweep's point, a tuned reading's
    best-rate point), and its verdict (None below MIN_SEEDS seeds)."""

    point: MultiplierPoint | TunedPoint
    verdict: str | None
    p: float = math.nan  # the verdict's p-value before Holm's adjustment


@dataclass(frozen=True)
class ColumnFound:
    """A column's cells by method, its seed count, whether it is a tuned reading, whether its intervals hold the
    held-out documents' variance besides the seeds', and the most passes over the data at which its multipliers
    read the baseline's curve (`read_epochs`; the methods' budget passes over it at most once, the reading of
    the curve a little further where a method is ahead); `missing`: what its sweep still lacks (then no cells)."""

    label: str
    budget: str
    x: float | None
    seeds: int
    tuned: bool
    cells: dict[str, Cell]
    missing: str = ""
    documents: bool = False
    read_epochs: float | None = None
    documents_note: str = ""  # why not `documents` (Sweep.documents_note)
    diverged: int = 0  # the sweep's cells whose run diverged (no loss: a seed lacking one lacks the column's value)
    baseline_alone: bool = False  # tuned, the baseline alone: each method at the one rate it trained


@dataclass(frozen=True)
class HeadlineFound:
    methods: list[str]
    columns: list[ColumnFound]
    # (column label, method) -> the verdict with Holm's adjustment over every test of the table's complete columns
    # instead of each column's: the stricter family a reader of the whole table may want
    table_verdicts: dict[tuple[str, str], str] = field(default_factory=dict)


def _budget_column(column: Column) -> ColumnFound:
    study = column.study
    sweep, sample = one_model(study, CellStore.of(study))
    if sample is None:
        return ColumnFound(column.label, column.budget, None, 0, False, {}, sweep.first_seed_gaps())
    if column.budget not in sample.labels:
        return ColumnFound(column.label, column.budget, None, len(sample.seeds), False, {},
                           f"no method has every seed's cell at {column.budget} tokens per parameter yet")
    i = sample.labels.index(column.budget)
    points, p_values = {}, {}
    for method in sample.k:
        if np.isnan(sample.table[method][i]).all():  # a budget only the baseline trains
            continue
        points[method] = point(sample, method, i)
        if sample.loo is not None:
            documents = None if sample.documents is None else np.log(sample.documents[method][:, i])
            p_values[method] = jackknife_p(math.log(sample.k[method][i]), np.log(sample.loo_of(method)[:, i]),
                                           documents)
    adjusted = holm(p_values)
    cells = {method: Cell(p, holm_verdict(adjusted.get(method, math.nan), math.log(p.multiplier), VERDICTS),
                          p_values.get(method, math.nan)) for method, p in points.items()}
    read = [epochs for p in points.values() if (epochs := p.read_epochs) is not None and math.isfinite(epochs)]
    return ColumnFound(column.label, column.budget, float(sample.x[i]), len(sample.seeds), False, cells,
                       documents=sample.documents is not None, read_epochs=max(read, default=None),
                       documents_note=sweep.documents_note)


def _tuned_column(column: Column) -> ColumnFound:
    study = column.study
    store = CellStore.of(study)
    tuning = tuned_multipliers(study, store.read_results(study) + store.read_diverged(study), verdict_at=column.budget)
    if tuning is None or column.budget not in tuning.labels:
        return ColumnFound(column.label, column.budget, None, 0, True, {},
                           "no seed has every rate's cells at every budget yet")
    i = tuning.labels.index(column.budget)
    cells = {}
    for method in tuning.methods:
        verdict = TUNED_VERDICTS[method.verdict] if method.verdict else None
        cells[method.method] = Cell(method.best[i], verdict, method.p)
    read = [epochs for cell in cells.values() if (epochs := cell.point.read_epochs) is not None
            and math.isfinite(epochs)]
    return ColumnFound(column.label, column.budget, float(tuning.x[i]), len(tuning.seeds), True, cells,
                       documents=tuning.documents, read_epochs=float(max(read)) if read else None,
                       documents_note=tuning.documents_note,
                       baseline_alone=tuning.baseline_alone)


def headline_table(headline: Headline) -> HeadlineFound:
    """Every column's cells; the methods in the order the columns first name them."""
    columns = [replace(_tuned_column(c) if rate_axis(c.study) else _budget_column(c),
                       diverged=len(CellStore.of(c.study).read_diverged(c.study))) for c in headline.columns]
    methods = list(dict.fromkeys(method for column in columns for method in column.cells))
    tested = {(column.label, method): cell for column, study in zip(columns, headline.sweeps, strict=True)
              if column.seeds >= len(study.seeds + study.more_seeds)  # a look before the end is no verdict
              for method, cell in column.cells.items() if cell.verdict is not None}
    adjusted = holm({f"{label}\n{method}": cell.p for (label, method), cell in tested.items()})
    table = {(label, method): holm_verdict(adjusted[f"{label}\n{method}"], math.log(cell.point.multiplier),
                                           VERDICTS) or "not shown" for (label, method), cell in tested.items()}
    return HeadlineFound(methods, columns, table)
