"""Gains against the training budget: paired differences at each budget, a log-linear trend fitted through them with
bootstrap intervals over the seeds, and the budget where the fitted gain's interval reaches zero.

The rule is the budget sweep's, written in configs/study/budget_sweep.toml before its cells ran:
gain(x) = a + b log10(x), x = training tokens per parameter of the baseline model, fitted by least squares to the
mean gains; 2,000 bootstrap resamples of the seeds (with replacement, each seed keeping all its budgets, so the
pairing holds) give the 95% band; the first budget on a grid where that band holds zero is where the gain is gone
(an extrapolation beyond the largest budget measured).

Bands only where the seeds can carry them: with fewer than MIN_SEEDS seeds the fit has no band, no slope interval
and no zero crossing (a bootstrap over two or three seeds has a handful of distinct resamples and a band far
narrower than any budget's own interval); a zero crossing more than ZERO_LIMIT times past the largest budget is
stated as a bound, not a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fits import percentile_interval, semi_log_fit
from .records import CellResult
from .spec import Study
from .stats import MIN_SEEDS, Difference, paired_difference
from .sweep import Sweep

RESAMPLES = 2000
GRID = np.logspace(-1, 4, 501)  # 0.1 to 10,000 tokens per parameter
ZERO_LIMIT = 2.0


@dataclass(frozen=True)
class GainPoint:
    """The paired gain at one budget, over every seed that has both cells there."""

    label: str
    tokens_per_parameter: float
    difference: Difference


@dataclass(frozen=True)
class Band:
    """The fitted gain's 95% bootstrap band over the grid `x` of tokens per parameter."""

    x: np.ndarray
    low: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class GainTrend:
    """gain(x) = intercept + slope_per_decade log10(x) of `method` over `against` through the mean gains at each
    budget (`points`; the fit over `seeds`, those common to every budget), with the slope's bootstrap interval and
    band, and where the band first holds zero: `zero_at` (None past ZERO_LIMIT x the largest budget, then
    `zero_beyond`, or where it never does), whether past the largest budget, whether already at the smallest."""

    method: str
    against: str
    seeds: list[int]
    points: list[GainPoint]
    intercept: float
    slope_per_decade: float
    slope_low: float | None = None
    slope_high: float | None = None
    band: Band | None = None
    zero_at: float | None = None
    zero_is_extrapolated: bool = False
    zero_from_the_start: bool = False
    zero_beyond: float | None = None


def tokens_per_parameter(study: Study, results: list[CellResult]) -> dict[str, float]:
    """Per budget label of the branched (or first) axis: training tokens per parameter of the baseline model."""
    return Sweep(study, tuple(results)).tokens_per_parameter


def paired_by_budget(study: Study, results: list[CellResult], method: str, against: str) -> dict[str, dict]:
    """{budget label: {seed: (method's val loss, against's)}} over the seeds where both cells are in."""
    axis = study.branch_axis or study.axes[0]
    out = {}
    for label in axis.values:
        at = {m: {r.seed: r.val_loss for r in results if r.setting[axis.name] == label and r.method == m}
              for m in (method, against)}
        seeds = sorted(set(at[method]) & set(at[against]))
        if seeds:
            out[label] = {seed: (at[method][seed], at[against][seed]) for seed in seeds}
    return out


def trend(study: Study, results: list[CellResult], method: str, against: str, seed: int = 0) -> GainTrend | None:
    """The paired gain of `method` over `against` at each budget, its fitted log-linear trend with a bootstrap
    band, and where the band first holds zero; None with fewer than three budgets or two common seeds."""
    x_of = tokens_per_parameter(study, results)
    pairs = {label: p for label, p in paired_by_budget(study, results, method, against).items() if label in x_of}
    seeds = sorted(set.intersection(*[set(p) for p in pairs.values()])) if pairs else []
    if len(pairs) < 3 or len(seeds) < 2:
        return None
    labels = sorted(pairs, key=x_of.__getitem__)
    x = np.array([x_of[label] for label in labels])
    table = np.array([[pairs[label][s][0] - pairs[label][s][1] for s in seeds] for label in labels])  # (budgets, seeds)
    a, b = semi_log_fit(x, table.mean(axis=1))
    points = []  # at each budget every seed that has both cells, not only the seeds common to all budgets
    for label in labels:
        points.append(GainPoint(label, x_of[label], _paired_gain(pairs[label])))
    if len(seeds) < MIN_SEEDS:
        return GainTrend(method, against, seeds, points, a, b)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(seeds), size=(RESAMPLES, len(seeds)))
    fits = np.array([semi_log_fit(x, table[:, draw].mean(axis=1)) for draw in draws])  # (RESAMPLES, 2)
    curves = fits[:, :1] + fits[:, 1:] * np.log10(GRID)[None, :]  # (RESAMPLES, grid)
    low, high = percentile_interval(curves, interpolate=True, axis=0)
    holds_zero = (low <= 0) & (high >= 0) & (x.min() <= GRID)
    zero = float(GRID[np.argmax(holds_zero)]) if holds_zero.any() else None
    beyond = zero is not None and zero > ZERO_LIMIT * x.max()
    slope_low, slope_high = percentile_interval(fits[:, 1], interpolate=True)
    return GainTrend(method, against, seeds, points, a, b, slope_low, slope_high, Band(GRID, low, high),
                     None if beyond else zero, zero is not None and zero > x.max(),
                     zero is not None and zero <= GRID[np.searchsorted(GRID, x.min())],
                     float(ZERO_LIMIT * x.max()) if beyond else None)




def _paired_gain(pairs: dict[int, tuple[float, float]]) -> Difference:
    """method - baseline at one budget over its pairs {seed: (method's loss, baseline's)}."""
    values, baseline = zip(*pairs.values(), strict=True)
    return paired_difference(values, baseline)


def trend_pairs(study: Study) -> list[tuple[str, str]]:
    """The gains a budget study fits: every method against the baseline, then the study's contrasts."""
    return [(m, study.baseline) for m in study.methods if m != study.baseline] + [(c[0], c[1]) for c in study.contrasts]


def budget_trends(study: Study, results: list[CellResult]) -> dict[str, list[GainTrend | None]]:
    """A branched study's fitted gains per budget group: for each of its `trend_pairs`, the `trend` fit (None where
    too few budgets or seeds)."""
    found = Sweep(study, tuple(results)).models() if study.branch_axis else {}
    return {label: [trend(study, list(sweep.results), *pair) for pair in trend_pairs(study)]
            for label, sweep in found.items()}


@dataclass(frozen=True)
class GainRow:
    """One of `trend_pairs` at each column budget of its `GainTable` (None where it has no pair of cells there), and
    its fitted trend (None where too few budgets or seeds)."""

    method: str
    against: str
    gains: tuple[Difference | None, ...]
    fit: GainTrend | None


@dataclass(frozen=True)
class GainTable:
    """A budget group's gains against the budget: tokens per parameter and epochs over the training data (where
    recorded) per budget label, smallest budget first; `columns`, the budgets with a gain (a budget only the
    baseline trains has none); a `GainRow` per pair of `trend_pairs`."""

    x: dict[str, float]
    epochs: dict[str, float]
    columns: tuple[str, ...]
    rows: tuple[GainRow, ...]


def gain_table(sweep: Sweep, fits: list[GainTrend | None]) -> GainTable | None:
    """The sweep's `GainTable` with `fits` (one per pair of `trend_pairs`); None without budgets or without a gain
    (where the baseline alone trains, as at a rate only it trains)."""
    study, results, x_of = sweep.study, list(sweep.results), sweep.tokens_per_parameter
    if not x_of:
        return None
    labels = sorted(x_of, key=x_of.__getitem__)
    epochs = {r.setting[study.branched_axis.name]: r.data_epochs for r in results}
    pairs = trend_pairs(study)
    paired = [paired_by_budget(study, results, *pair) for pair in pairs]
    columns = tuple(label for label in labels if any(label in by_budget for by_budget in paired))
    if not columns:
        return None
    rows = []
    for (method, against), fit, by_budget in zip(pairs, fits, paired, strict=True):
        gains = tuple(_paired_gain(by_budget[label]) if label in by_budget else None for label in columns)
        rows.append(GainRow(method, against, gains, fit))
    return GainTable({label: x_of[label] for label in labels},
                     {label: e for label in labels if (e := epochs.get(label)) is not None}, columns, tuple(rows))
