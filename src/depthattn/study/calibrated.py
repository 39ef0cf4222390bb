"""Intervals that hold their coverage at the seed counts a study uses, and verdicts stated as a family.

A percentile bootstrap over n seeds resamples the n seeds observed: its spread is a plug-in estimate's, about
sqrt((n - 1) / n) of the standard error, read with the normal's quantiles where Student's t at n - 1 degrees of
freedom applies. At five seeds, on planted sweeps with the committed cells' seed noise, its 95% intervals of the
multiplier cover about 85% of the time (tests/study/test_calibrated.py). The calibrated interval is Tukey's
jackknife t-interval (Efron and Tibshirani, An Introduction to the Bootstrap, 1993, ch. 11): around the estimate
from every seed, its leave-one-seed-out standard error times Student's t quantile at n - 1 degrees of freedom, on
the log scale for a multiplier (a ratio). The same simulation checks that it covers at least 93%.

Verdicts on several methods at once carry Holm's step-down adjustment of their two-sided p-values (from the same t
statistic), so that "grows" or "fades" for any one method holds for the family at 5%."""

from __future__ import annotations

import math

import numpy as np

from .stats import CONFIDENCE, MIN_SEEDS


def jackknife_se(leave_one_out: np.ndarray) -> np.ndarray:
    """The jackknife standard error of an estimate from its `leave_one_out` values (n, ...), one seed left out each:
    sqrt((n - 1) / n * sum (theta_i - mean)^2); nan where a value is not finite."""
    n = leave_one_out.shape[0]
    with np.errstate(invalid="ignore"):
        spread = leave_one_out - leave_one_out.mean(axis=0)
        return np.sqrt((n - 1) / n * (spread ** 2).sum(axis=0))


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, n - 1))


def jackknife_t(point: np.ndarray, leave_one_out: np.ndarray, confidence: float = CONFIDENCE,
                documents: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): `point` -/+ the jackknife standard error times Student's t at n - 1 degrees of freedom; nan
    below MIN_SEEDS seeds or where a value is not finite. `documents`: the estimate with each group of held-out
    documents left out in turn (groups, ...), whose jackknife variance (the evaluation set's) adds to the seeds'."""
    point = np.asarray(point, dtype=float)
    n = leave_one_out.shape[0]
    if n < MIN_SEEDS:
        return np.full(point.shape, math.nan), np.full(point.shape, math.nan)
    se = jackknife_se(leave_one_out)
    if documents is not None:
        se = np.sqrt(se ** 2 + jackknife_se(documents) ** 2)
    half = t_quantile(n, confidence) * se
    return point - half, point + half


def log_jackknife_t(point: np.ndarray, leave_one_out: np.ndarray, confidence: float = CONFIDENCE,
                    documents: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`jackknife_t` of positive ratios (multipliers) on the log scale, returned on theirs."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # an unbounded ratio's interval: inf
        low, high = jackknife_t(np.log(point), np.log(leave_one_out), confidence,
                                None if documents is None else np.log(documents))
        return np.exp(low), np.exp(high)


def jackknife_p(point: float, leave_one_out: np.ndarray, documents: np.ndarray | None = None) -> float:
    """Two-sided p-value of `point` against zero with the jackknife t statistic (n - 1 degrees of freedom);
    `documents` as `jackknife_t`'s."""
    from scipy.stats import t

    se = float(jackknife_se(leave_one_out))
    if documents is not None:
        se = math.sqrt(se ** 2 + float(jackknife_se(documents)) ** 2)
    n = leave_one_out.shape[0]
    if not (math.isfinite(point) and math.isfinite(se)) or n < MIN_SEEDS:
        return math.nan
    if se == 0:
        return 0.0 if point else 1.0
    return float(2 * t.sf(abs(point) / se, n - 1))


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family. A nan p-value (a member whose test could not be made, e.g.
    an unbounded leave-one-out multiplier) stays nan but counts in the family's size, as a p of 1 would: leaving it
    out would shrink every other member's adjustment."""
    finite = sorted((p, name) for name, p in p_values.items() if math.isfinite(p))
    adjusted, running = {name: math.nan for name in p_values}, 0.0
    for rank, (p, name) in enumerate(finite):
        running = max(running, min(1.0, (len(p_values) - rank) * p))
        adjusted[name] = running
    return adjusted


def verdict(low: float | None, high: float | None) -> str | None:
    """The grows / holds / fades reading of an interval of a slope (None without one): the one rule every report
    states its trends by."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    return "grows" if low > 0 else "fades" if high < 0 else "holds"


def holm_verdict(p_holm: float, estimate: float, words: tuple[str, str, str] = ("grows", "holds", "fades")
                 ) -> str | None:
    """By a Holm-adjusted p-value and the estimate's sign (a slope, a log multiplier): `words` for above zero, not
    shown, below zero (grows / holds / fades by default); None without a p-value. Every Holm-adjusted verdict of the
    reports is read by this one rule."""
    if math.isnan(p_holm):
        return None
    above, neither, below = words
    return neither if p_holm >= 1 - CONFIDENCE else above if estimate > 0 else below
