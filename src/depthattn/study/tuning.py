"""Multipliers that survive tuning: a branched sweep with a learning-rate axis (configs/study/lr_sweep_wiki.toml,
whose rule was written before its cells ran) read against the baseline at its best rate.

- The baseline's envelope: at every budget, its rate with the lowest mean loss over the seeds; the envelope is those
  means, made non-increasing (the curve of `curve.BaselineCurve`). Choosing the rate on the same held-out data
  that scores the methods biases the envelope low, in the baseline's favour: the comparison is conservative.
- Each method at its own best rate per budget (chosen the same way), and at the reference rate, as data
  multipliers on that envelope.
- Intervals: the calibrated one (study/calibrated.py), the rate choices redone with each seed left out.
- Verdict per method at the rule's budget, its best rate against the envelope: "survives tuning" if the interval,
  Holm-adjusted over the methods, lies above 1; "reversed" if below; otherwise "not shown". A best rate at the
  grid's edge is flagged: the optimum may lie outside the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .calibrated import holm, jackknife_p, log_jackknife_t
from .curve import BaselineCurve
from .records import CellResult
from .spec import Study
from .stats import CONFIDENCE, MIN_SEEDS
from .sweep import Sweep

RATE_KEY = "optim.lr"


@dataclass(frozen=True)
class TunedPoint:
    """A method's multiplier at one budget on the baseline's envelope, with its calibrated interval."""

    label: str
    multiplier: float
    low: float | None
    high: float | None
    rate: str  # the rate it was read at (its best, or the reference)
    at_edge: bool  # that rate is the grid's lowest or highest


@dataclass(frozen=True)
class TunedMethod:
    method: str
    best: list[TunedPoint]  # at its own best rate per budget
    reference: list[TunedPoint]  # at the reference rate
    p_holm: float  # at the verdict budget, its best rate: Holm-adjusted over the methods
    verdict: str | None


@dataclass(frozen=True)
class Tuning:
    rates: list[str]
    reference: str
    labels: list[str]  # budgets every rate has, ascending
    x: np.ndarray
    seeds: list[int]
    baseline_rates: list[str]  # the envelope's rate at each budget
    methods: list[TunedMethod]
    verdict_at: str


def rate_axis(study: Study):
    """The study's learning-rate axis (a non-branched axis over optim.lr), or None."""
    return next((axis for axis in study.axes if axis.key == RATE_KEY and not axis.branches), None)


def _means(table: np.ndarray) -> np.ndarray:
    """Mean over the seeds of each budget's row (budgets, seeds); nan where the row has no cell."""
    empty = np.isnan(table).all(axis=1)
    return np.where(empty, math.nan, np.nansum(table, axis=1) / np.maximum((~np.isnan(table)).sum(axis=1), 1))


def _best(tables: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """Per budget, the lowest mean loss over the rates' tables (budgets, seeds) and the rate giving it (nan and ''
    where no rate has that budget)."""
    rates = list(tables)
    means = np.stack([_means(tables[r]) for r in rates])  # (rates, budgets)
    best, chosen = [], []
    for column in means.T:
        if np.isnan(column).all():
            best.append(math.nan)
            chosen.append("")
        else:
            i = int(np.nanargmin(column))
            best.append(float(column[i]))
            chosen.append(rates[i])
    return np.array(best), chosen


def _multipliers(x: np.ndarray, by_rate: dict[str, dict[str, np.ndarray]], baseline: str, method: str,
                 reference: str, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(best-rate multipliers, reference-rate multipliers, the method's best rates, the baseline's) with the seeds
    `keep` (indices)."""
    envelope, baseline_rates = _best({r: t[baseline][:, keep] for r, t in by_rate.items()})
    finite = np.isfinite(envelope)
    curve = BaselineCurve.fit(x[finite], envelope[finite])
    best, rates = _best({r: t[method][:, keep] for r, t in by_rate.items() if method in t})
    at_reference = _means(by_rate[reference][method][:, keep])
    def read(means: np.ndarray) -> np.ndarray:
        return np.array([curve.tokens_for(m) for m in means]) / x

    return read(best), read(at_reference), rates, baseline_rates


def tuned_multipliers(study: Study, results: list[CellResult], reference: str = "2e-3", verdict_at: str | None = None
                      ) -> Tuning | None:
    """The tuned reading of a learning-rate sweep; None without a rate axis, a branched axis and one seed every rate
    has at every budget. `verdict_at`: the budget of the verdict, by default the longest that every method trains."""
    axis = rate_axis(study)
    if axis is None or study.branch_axis is None:
        return None
    by_rate = {}
    for sweep in Sweep(study, tuple(results)).models().values():
        rate = sweep.results[0].setting[axis.name]
        found = sweep.loss_table
        if study.baseline not in found.losses:
            return None
        by_rate[rate] = (found.labels, found.x, found.seeds, found.losses)
    if reference not in by_rate or len(by_rate) < 2:
        return None
    labels = [label for label in by_rate[reference][0] if all(label in v[0] for v in by_rate.values())]
    seeds = sorted(set.intersection(*(set(v[2]) for v in by_rate.values())))
    if len(labels) < 3 or not seeds:
        return None
    x = np.array([by_rate[reference][1][by_rate[reference][0].index(label)] for label in labels])
    tables = {}
    for rate, (group_labels, _, group_seeds, table) in by_rate.items():
        rows = [group_labels.index(label) for label in labels]
        columns = [group_seeds.index(s) for s in seeds]
        tables[rate] = {m: t[np.ix_(rows, columns)] for m, t in table.items()}
    if verdict_at is None:
        shared = [label for label in study.branch_axis.values if label not in study.branch_axis.baseline_only]
        verdict_at = max(shared, key=study.branch_axis.values.get)
    n = len(seeds)
    everyone = np.arange(n)
    leave_out = [np.delete(everyone, j) for j in range(n)] if n >= MIN_SEEDS else []
    rates = [r for r in axis.values if r in tables]
    methods = [m for m in study.methods if m != study.baseline and all(m in t for t in tables.values())]
    found, p_values = [], {}
    baseline_rates = _best({r: t[study.baseline] for r, t in tables.items()})[1]
    for method in methods:
        best, at_reference, best_rates, _ = _multipliers(x, tables, study.baseline, method, reference, everyone)
        loo = [_multipliers(x, tables, study.baseline, method, reference, keep) for keep in leave_out]

        def points(k: np.ndarray, which: int, chosen: list[str]) -> list[TunedPoint]:
            out = []
            for i, label in enumerate(labels):
                low = high = None
                if loo and not math.isnan(k[i]):
                    lo, hi = log_jackknife_t(k[i], np.array([values[which][i] for values in loo]))
                    low, high = float(lo), float(hi)
                out.append(TunedPoint(label, float(k[i]), low, high, chosen[i],
                                      chosen[i] in (rates[0], rates[-1])))
            return out

        best_points = points(best, 0, best_rates)
        found.append((method, best_points, points(at_reference, 1, [reference] * len(labels))))
        if loo and verdict_at in labels:
            i = labels.index(verdict_at)
            p_values[method] = jackknife_p(math.log(best[i]), np.log([values[0][i] for values in loo]))
    adjusted = holm(p_values) if p_values else {}
    out = []
    for method, best_points, reference_points in found:
        p = adjusted.get(method, math.nan)
        point = next((q for q in best_points if q.label == verdict_at), None)
        verdict = None
        if point is not None and not math.isnan(p):
            verdict = "not shown" if p >= 1 - CONFIDENCE else (
                "survives tuning" if point.multiplier > 1 else "reversed")
        out.append(TunedMethod(method, best_points, reference_points, p, verdict))
    return Tuning(rates, reference, labels, x, seeds, baseline_rates, out, verdict_at)


