"""The fits and intervals every analysis reads its numbers by, each written once: least-squares lines in log
space, a point with its 95% interval from resample draws, and a slope with its intervals read as a verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .calibrated import verdict


def percentile_interval(draws: np.ndarray, interpolate: bool = False, axis: int | None = None):
    """The 95% percentile interval of resample draws: (low, high) floats, or arrays along `axis`. `interpolate`:
    between the draws (the budget trend's rule); otherwise a drawn value, which keeps an unbounded (inf) one."""
    if interpolate:
        low, high = np.percentile(draws, [2.5, 97.5], axis=axis)
    else:
        low, high = np.quantile(draws, [0.025, 0.975], method="inverted_cdf", axis=axis)
    return (float(low), float(high)) if axis is None else (low, high)


def exp_linear(coefficients, features, draws: np.ndarray | None = None) -> tuple[float, float | None, float | None]:
    """exp(sum of coefficients x features), a multiplier read off a fit in log space, with the 95% percentile
    interval of the same read off each resample's coefficients (`draws`, (resamples, coefficients); none without)."""
    value = math.exp(sum(c * f for c, f in zip(coefficients, features, strict=True)))
    if draws is None:
        return value, None, None
    return value, *percentile_interval(np.exp(sum(draws[:, i] * f for i, f in enumerate(features))))


def log_log_fit(x: np.ndarray, k: np.ndarray) -> tuple[float, float]:
    """(gamma, log c) of k = c x^gamma, least squares in log-log over the finite multipliers (nan with fewer than
    two): the slope of a multiplier in the budget, or in depth on the depth axis."""
    keep = np.isfinite(k) & (k > 0)
    if keep.sum() < 2:
        return math.nan, math.nan
    gamma, log_c = np.polyfit(np.log(x[keep]), np.log(k[keep]), 1)
    return float(gamma), float(log_c)


def semi_log_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of y = a + b log10(x), least squares: a gain in nats against the budget."""
    b, a = np.polyfit(np.log10(x), y, 1)
    return float(a), float(b)


def log_surface_fit(points: list[tuple[float, float, float]], interaction: bool = False) -> np.ndarray:
    """(a, gamma, delta) of log k = a + gamma log x + delta log L over points (x, L, k), and with `interaction` eta
    of the added term eta log x log L; nan without enough finite points spanning two depths and two budgets."""
    rows = [(x, depth, k) for x, depth, k in points if math.isfinite(k) and k > 0]
    size = 4 if interaction else 3
    if len(rows) < size + 1 or len({r[1] for r in rows}) < 2 or len({r[0] for r in rows}) < 2:
        return np.full(size, math.nan)
    x, depth, k = map(np.array, zip(*rows, strict=True))
    columns = [np.ones(len(x)), np.log(x), np.log(depth)] + ([np.log(x) * np.log(depth)] if interaction else [])
    return np.linalg.lstsq(np.column_stack(columns), np.log(k), rcond=None)[0]


@dataclass(frozen=True)
class Slope:
    """A fitted slope with its 95% seed-bootstrap interval (`low`, `high`) and its calibrated one (`t_low`,
    `t_high`: study/calibrated.py), each None where the seeds cannot carry it, and each read by the one rule."""

    value: float
    low: float | None = None
    high: float | None = None
    t_low: float | None = None
    t_high: float | None = None

    @property
    def verdict(self) -> str | None:
        """grows / holds / fades by the bootstrap interval (None without one)."""
        return verdict(self.low, self.high)

    @property
    def t_verdict(self) -> str | None:
        """The same by the calibrated interval."""
        return verdict(self.t_low, self.t_high)
