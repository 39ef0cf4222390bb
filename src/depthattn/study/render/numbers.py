"""The numbers every page writes the same way: a paired difference with its interval, a multiplier with its
interval and marks, where a gain's band reaches zero."""

from __future__ import annotations

import math

from ..multiplier import EXTRAPOLATION_LIMIT, MultiplierPoint
from ..stats import MIN_SEEDS, Difference
from ..sweep import REPEATS_FLAG
from ..trend import GRID, ZERO_LIMIT, GainTrend


def bracket(low: float | None, high: float | None) -> str:
    """' [+0.012, +0.034]' (a slope's interval), '' without one."""
    return f" [{low:+.3f}, {high:+.3f}]" if low is not None else ""


def format_interval(difference: Difference | None) -> str:
    if difference is None:
        return "—"
    if math.isnan(difference.diff_low):
        return f"{difference.diff_mean:+.4f} (n={difference.n})"
    return f"{difference.diff_mean:+.4f} [{difference.diff_low:+.4f}, {difference.diff_high:+.4f}]"


def format_multiplier(point: MultiplierPoint, flops_ratio: float = 1.0, calibrated: bool = False,
                      flag_epochs: float = REPEATS_FLAG) -> str:
    """'1.23x [1.10, 1.41]' with † for an extrapolation and ‡ where the baseline's curve is read past
    `flag_epochs` (the study's); the limit where it reads too far past the measured budgets. The interval: the
    percentile bootstrap's, or the calibrated one's."""
    if not point.printable:  # a bound instead: the limit of the curve that may be read
        if math.isnan(point.read_at):
            return "—"
        x, read, limit = point.tokens_per_parameter, point.read_at, EXTRAPOLATION_LIMIT
        bound = point.curve_high * limit if read > x else point.curve_low / limit
        return f"{'>' if read > x else '<'} {bound / x / flops_ratio:.2f}x†"
    text = f"{point.multiplier / flops_ratio:.2f}x"
    low, high = (point.t_low, point.t_high) if calibrated else (point.low, point.high)
    if low is not None and high is not None:  # set together
        text += f" [{low / flops_ratio:.2f}, {high / flops_ratio:.2f}]"
    if point.extrapolated:
        text += "†"
    if point.read_epochs is not None and point.read_epochs > flag_epochs:
        text += "‡"
    return text


def describe_zero(fit: GainTrend) -> str:
    """Where the fitted gain's 95% band first holds zero, in words."""
    if fit.band is None:
        return f"no band: {len(fit.seeds)} seeds, fewer than the {MIN_SEEDS} a seed bootstrap needs"
    if fit.zero_beyond is not None:
        return (f"beyond {fit.zero_beyond:,.3g} tokens per parameter ({ZERO_LIMIT:g} x the largest budget; "
                "further is not extrapolated)")
    if fit.zero_from_the_start:
        return "its band holds zero already at the smallest budget"
    if fit.zero_at is None:
        return f"its band excludes zero up to {GRID[-1]:,.0f} tokens per parameter"
    where = f"{fit.zero_at:,.3g} tokens per parameter"
    return f"{where} (extrapolated)" if fit.zero_is_extrapolated else where
