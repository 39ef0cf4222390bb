"""The baseline's loss against tokens per parameter, as a multiplier reads it: the measured budgets' mean losses made
non-increasing (isotonic regression), interpolated in log tokens per parameter by a monotone cubic, and read beyond
them on a fitted L = E + B x^-beta anchored at the nearer end (the rule: depthattn.study.multiplier)."""

from __future__ import annotations

import functools
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np


@dataclass
class BaselineCurve:
    """The baseline's loss against tokens per parameter: measured budgets `x` (ascending) with non-increasing mean
    losses, and the power law L = E + B x^-beta through them for reading beyond them (None where it cannot be
    fitted)."""

    x: np.ndarray
    loss: np.ndarray
    given_power: tuple[float, float, float] | None | str = "fitted at first use"

    @classmethod
    def fit(cls, x: np.ndarray, loss: np.ndarray) -> BaselineCurve:
        from scipy.optimize import isotonic_regression

        return cls(x, isotonic_regression(loss, increasing=False).x)

    @functools.cached_property
    def power(self) -> tuple[float, float, float] | None:
        """The power law, fitted when first read (a curve read only between its budgets never needs it)."""
        return power_law(self.x, self.loss) if isinstance(self.given_power, str) else self.given_power

    @functools.cached_property
    def _log_x_of_loss(self):
        """log x against loss, a monotone cubic (a straight line between budgets would lie above a convex curve and
        overstate every multiplier); a flat stretch is reached at its start. None for a flat curve."""
        from scipy.interpolate import PchipInterpolator

        loss_values, first = np.unique(self.loss, return_index=True)
        return PchipInterpolator(loss_values, np.log(self.x[first])) if len(first) >= 2 else None

    def tokens_for(self, loss: float) -> float:
        """Tokens per parameter at which the curve reaches `loss` (inf where it never does, nan where unknown)."""
        if math.isnan(loss):
            return math.nan
        if self.loss[-1] <= loss <= self.loss[0]:
            if self._log_x_of_loss is None:
                return float(self.x[0])
            return float(np.exp(self._log_x_of_loss(loss)))
        if self.power is None:
            return math.nan
        E, _, beta = self.power  # the fitted shape, anchored at the nearer end of the measured curve
        end = -1 if loss < self.loss[-1] else 0
        if loss <= E:
            return math.inf
        ratio = (self.loss[end] - E) / (loss - E)
        if ratio > 0 and math.log(self.x[end]) + math.log(ratio) / beta >= math.log(sys.float_info.max):
            return math.inf  # a shallow fitted curve (small beta) reaches that loss past any float
        return float(self.x[end] * ratio ** (1 / beta))


def power_law(x: np.ndarray, loss: np.ndarray) -> tuple[float, float, float] | None:
    """Least squares L = E + B x^-beta, 0 <= E < min(L), B > 0, 0 < beta < 2; None with fewer than three budgets
    or when the fit fails."""
    from scipy.optimize import curve_fit

    if len(x) < 3:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params, _ = curve_fit(lambda t, E, B, beta: E + B * t ** -beta, x, loss,
                                  p0=(0.8 * loss.min(), loss.max() - 0.8 * loss.min(), 0.3),
                                  bounds=([0, 1e-9, 1e-3], [loss.min(), np.inf, 2]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    E, B, beta = (float(p) for p in params)
    return E, B, beta

