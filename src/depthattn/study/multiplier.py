"""Gains as multipliers: how much more training the baseline needs to reach a method's loss.

A gap in nats must shrink as the loss falls even for a method worth a constant amount of extra training: with
L(D) = E + B D^-beta, a method that turns D tokens into the loss the baseline reaches with k D is ahead by
B D^-beta (1 - k^-beta). The field states such gains as multipliers, and a multiplier is what can carry over to a
larger model. The rule (written in configs/study/budget_sweep.toml, and in each sweep's config before its cells
ran):

- Data multiplier at budget D: the tokens the baseline needs to reach the method's mean loss at D, divided by D.
  The baseline's curve is its mean loss at each measured budget, made non-increasing (isotonic regression) and
  interpolated in log D by a monotone cubic (PCHIP); it needs no functional form between budgets. Beyond the
  measured budgets (a method better than the baseline's longest run, or worse than its shortest) it is read from
  a fitted L(D) = E + B D^-beta, anchored at the nearer end of the measured curve, and the multiplier is marked as
  an extrapolation; one that reads the curve more than EXTRAPOLATION_LIMIT times past the measured budgets is
  stated as a bound, not a number.
- Epochs: the baseline's curve at the point read, in passes over the training data; a multiplier that reads it
  past REPEATS_FLAG epochs is flagged (repeating the data flattens the curve, which inflates multipliers).
- Compute multiplier: the data multiplier divided by the method's training FLOPs per token over the baseline's.
- Intervals: 95% percentile intervals from RESAMPLES bootstrap resamples of the seeds, each resample keeping a
  seed's cells of every method and budget together (the pairing holds); none with fewer than MIN_SEEDS seeds. This
  was the pre-registered rule, and it under-covers at five seeds: beside it every point and gamma also carry the
  calibrated interval (study/calibrated.py: the jackknife t-interval over leave-one-seed-out values, each leaving a
  seed out of every method), and gamma's verdicts carry Holm's adjustment over the methods.
- Verdict per method: gamma, the least-squares slope of log multiplier against log D over the budgets that pass
  over the data at most REPEATS_FLAG times, with its bootstrap interval: above zero the multiplier **grows** with
  the budget, below it **fades**, across zero it **holds**.
- Beside it, the joint fit over the same budgets: L_m(D) = E + B (k_m D^(1 + gamma_m))^-beta, E, B and beta shared
  by every method, the baseline's k = 1 and gamma = 0 (k_m D^gamma_m is method m's multiplier at D tokens per
  parameter), with its residual: where the power law misses the baseline's curve by as much as the gains, its
  gammas say more about the misfit than about the methods. Its intervals: the bootstrap percentiles, and the
  calibrated ones (the fit redone with each seed left out), whose gamma verdict carries Holm's adjustment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .calibrated import holm, holm_verdict, jackknife_p, jackknife_t, log_jackknife_t
from .curve import power_law
from .fits import Slope, exp_linear, log_log_fit, percentile_interval
from .records import CellResult
from .spec import Study
from .stats import MIN_SEEDS
from .sweep import SeedBootstrap, Sweep, leave_one_out, within_repeats

FIT_RESAMPLES = 400  # the joint fit is a nonlinear least squares: fewer resamples, each warm-started
EXTRAPOLATION_LIMIT = 2.0
MIN_FIT_BUDGETS = 3  # the joint fit's budgets (at most REPEATS_FLAG epochs) fewer than this: no joint fit
FIT_AT = 20.0  # the fitted multiplier is stated at 20 tokens per parameter, about compute-optimal


@dataclass(frozen=True)
class MultiplierPoint:
    """A method's data multiplier at one budget (`label`, at `tokens_per_parameter`), with where it read the
    baseline's curve (`read_at`; the curve's measured span `curve_low` to `curve_high`): outside it `extrapolated`,
    too far outside not `printable` (a bound instead), in `read_epochs` passes over the data; its 95% bootstrap
    interval (`low`, `high`) and calibrated one (`t_low`, `t_high`) where the seeds carry them."""

    label: str
    tokens_per_parameter: float
    multiplier: float
    read_at: float
    extrapolated: bool
    printable: bool
    read_epochs: float | None
    curve_low: float
    curve_high: float
    low: float | None = None
    high: float | None = None
    t_low: float | None = None
    t_high: float | None = None


@dataclass(frozen=True)
class BudgetTrend:
    """A method's multiplier against the budget, k = c x^gamma over the budgets within REPEATS_FLAG epochs: gamma
    with its intervals, log c, the resamples' (gamma, log c) pairs (`draws`, (RESAMPLES, 2); None below MIN_SEEDS
    seeds) and gamma's p-value, alone and Holm-adjusted over the methods."""

    gamma: Slope
    log_c: float
    draws: np.ndarray | None = None
    p: float = math.nan
    p_holm: float = math.nan

    @property
    def holm_verdict(self) -> str | None:
        return holm_verdict(self.p_holm, self.gamma.value)


@dataclass(frozen=True)
class MethodMultipliers:
    """A method's multipliers at each budget it has, its trend, and its training FLOPs per token over the
    baseline's (None where not given)."""

    method: str
    flops_ratio: float | None
    points: tuple[MultiplierPoint, ...]
    trend: BudgetTrend
    # a sensitivity read after the rule: gamma over only the budgets whose reading of the baseline's curve stays
    # within REPEATS_FLAG epochs too; None where no fitted budget reads past them, or fewer than two are left
    trend_within_reading: BudgetTrend | None = None


@dataclass(frozen=True)
class JointFitMethod:
    """A method in the joint fit: k (its multiplier at 1 token per parameter), gamma with its bootstrap and
    calibrated intervals, the fitted multiplier at FIT_AT tokens per parameter with both, and gamma's
    Holm-adjusted p-value over the methods (nan below MIN_SEEDS seeds)."""

    k: float
    gamma: Slope
    at: float
    at_low: float | None = None
    at_high: float | None = None
    at_t_low: float | None = None
    at_t_high: float | None = None
    p_holm: float = math.nan

    @property
    def holm_verdict(self) -> str | None:
        return holm_verdict(self.p_holm, self.gamma.value)


@dataclass(frozen=True)
class JointFit:
    """L_m(D) = E + B (k_m D^(1 + gamma_m))^-beta over every method's mean losses, its residual, the parameters
    that sit on a bound, and whether FIT_AT lies near enough to the fitted budgets to state the fit there."""

    E: float
    B: float
    beta: float
    rms_residual: float
    methods: dict[str, JointFitMethod]
    at_bounds: list[str]
    at_printable: bool


@dataclass(frozen=True)
class Multipliers:
    """A sweep's multipliers: the budgets some method has (`labels`, at tokens per parameter `x`), the seeds read,
    a row per method, the joint fit over `fit_budgets` (None with too few), the baseline's fitted power law
    (`curve`), and whether the calibrated intervals hold the held-out documents' variance (`documents`)."""

    labels: list[str]
    x: list[float]
    seeds: list[int]
    baseline: str
    rows: tuple[MethodMultipliers, ...]
    documents: bool
    fit: JointFit | None
    fit_budgets: list[str]
    curve: tuple[float, float, float] | None
    documents_note: str = ""  # why not `documents` (Sweep.documents_note)


def multipliers(study: Study, results: list[CellResult], flops_ratio: dict[str, float] | None = None,
                seed: int = 0) -> Multipliers | None:
    """Every method's data (and, given each method's FLOPs per token over the baseline's, compute) multiplier at
    each budget of one model's cells, with bootstrap intervals where the seeds can carry them; None without a
    branched axis, three budgets and one seed that every method has at every budget."""
    return sweep_multipliers(Sweep(study, tuple(results), seed), flops_ratio)


def sweep_multipliers(sweep: Sweep, flops_ratio: dict[str, float] | None = None) -> Multipliers | None:
    """`multipliers` of a sweep of one model."""
    sample = sweep.bootstrap
    if sample is None or not sample.k:  # no method besides the baseline has cells yet
        return None
    labels, x, table = sample.labels, sample.x, sample.table
    fitted = sample.in_fit
    found, within = [], {}
    for method in sample.k:
        points = tuple(point(sample, method, i) for i in range(len(labels))
                       if not np.isnan(table[method][i]).all())  # not a budget only the baseline trains
        found.append((method, points, budget_trend(sample, method)))
        read_within = fitted & within_repeats(sample.read[method], sample.epochs_per_x)
        if sample.epochs_per_x and read_within.sum() >= 2 and (fitted & ~read_within).any():
            within[method] = budget_trend(sample, method, read_within)
    adjusted = holm({method: trend.p for method, _, trend in found})  # the family: every method's gamma
    # the same family: a method without flagged budgets keeps its own p
    adjusted_within = holm({method: within[method].p if method in within else trend.p for method, _, trend in found})
    rows = tuple(MethodMultipliers(method, (flops_ratio or {}).get(method), points,
                                   replace(trend, p_holm=adjusted[method]),
                                   replace(within[method], p_holm=adjusted_within[method]) if method in within
                                   else None)
                 for method, points, trend in found)
    stacked = np.isnan(np.stack([table[m] for m in sample.k]))  # (methods, budgets, seeds), the baseline's left out
    shown = ~stacked.all(axis=(0, 2))  # some method has points: not a budget only the baseline trains (so far)
    fitted &= ~stacked.any(axis=(0, 2))  # every method has its cells
    return Multipliers(
        [label for label, keep in zip(labels, shown, strict=True) if keep], x[shown].tolist(), sample.seeds,
        sweep.study.baseline,
        rows, sample.documents is not None,
        joint_fit(x[fitted], {m: t[fitted] for m, t in table.items()}, sweep.study.baseline,
                  sample.generator() if sample.boot is not None else None, len(sample.seeds),
                  None if sample.document_tables is None else
                  [{m: t[fitted] for m, t in without.items()} for without in sample.document_tables])
        if fitted.sum() >= MIN_FIT_BUDGETS else None,
        [label for label, keep in zip(labels, fitted, strict=True) if keep], sample.curve.power,
        sweep.documents_note)


def budget_trend(sample: SeedBootstrap, method: str, fitted: np.ndarray | None = None) -> BudgetTrend:
    """`method`'s gamma over the budgets within REPEATS_FLAG epochs (or those `fitted` marks), with its intervals
    where there are resamples (the held-out documents' variance added to the calibrated one where the cells store
    it)."""
    fitted = sample.in_fit if fitted is None else fitted
    x, k = sample.x, sample.k[method]
    gamma, log_c = log_log_fit(x[fitted], k[fitted])
    if sample.boot is None:
        return BudgetTrend(Slope(gamma), log_c)
    draws = np.array([log_log_fit(x[fitted], b[fitted]) for b in sample.boot_of(method)])  # (RESAMPLES, 2)
    low, high = percentile_interval(draws[:, 0])
    gammas = np.array([log_log_fit(x[fitted], b[fitted])[0] for b in sample.loo_of(method)])  # (seeds,)
    by_documents = None if sample.documents is None else np.array(
        [log_log_fit(x[fitted], b[fitted])[0] for b in sample.documents[method]])  # (DOCUMENT_GROUPS,)
    t_low, t_high = jackknife_t(np.array(gamma), gammas, documents=by_documents)
    return BudgetTrend(Slope(gamma, low, high, float(t_low), float(t_high)), log_c, draws,
                       jackknife_p(gamma, gammas, documents=by_documents))


def point(sample: SeedBootstrap, method: str, i: int, calibrated: bool = True) -> MultiplierPoint:
    """`method`'s multiplier at budget i with its intervals (the calibrated one unless not `calibrated`)."""
    labels, x, k, read = sample.labels, sample.x, sample.k[method], sample.read[method]
    outside = max(read[i] / x[-1], x[0] / read[i]) if read[i] > 0 else math.inf
    low = high = t_low = t_high = None
    if sample.boot is not None:
        low, high = percentile_interval(sample.boot_of(method)[:, i])
    if calibrated and sample.loo is not None:
        documents = None if sample.documents is None else sample.documents[method][:, i]
        t_low, t_high = map(float, log_jackknife_t(k[i], sample.loo_of(method)[:, i], documents=documents))
    epochs_per_x = sample.epochs_per_x
    return MultiplierPoint(labels[i], float(x[i]), float(k[i]), float(read[i]), not x[0] <= read[i] <= x[-1],
                           bool(outside <= EXTRAPOLATION_LIMIT) if not math.isnan(read[i]) else False,
                           epochs_per_x * read[i] if epochs_per_x else None, float(x[0]), float(x[-1]),
                           low, high, t_low, t_high)


def _predict(params: np.ndarray, x: np.ndarray, n_methods: int) -> np.ndarray:
    """Joint-fit losses (methods, budgets); params: E, log B, beta, then log k and gamma of each non-baseline
    method (the baseline is row 0)."""
    E, log_b, beta = params[:3]
    log_k = np.concatenate([[0.0], params[3::2][:n_methods - 1]])
    gamma = np.concatenate([[0.0], params[4::2][:n_methods - 1]])
    log_d = log_k[:, None] + (1 + gamma[:, None]) * np.log(x)[None, :]
    return E + np.exp(log_b - beta * log_d)


def _bounds(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joint fit's bounds: 0 <= E <= the lowest mean loss, 0.001 <= beta <= 2, -1 <= gamma <= 1."""
    lower = np.r_[0.0, -np.inf, 1e-3, [-np.inf, -1.0] * (len(means) - 1)]
    upper = np.r_[means.min(), np.inf, 2.0, [np.inf, 1.0] * (len(means) - 1)]
    return lower, upper


def at_bounds(params: np.ndarray, means: np.ndarray, methods: list[str]) -> list[str]:
    """The fitted parameters that sit on a bound (within 0.1% of its range), e.g. "E = 0 (its lower bound)": the
    data do not place them, and the other parameters absorb what they cannot."""
    lower, upper = _bounds(means)
    names = ["E", "log B", "beta", *(f"{name} of {m}" for m in methods[1:] for name in ("log k", "gamma"))]
    found = []
    for name, value, low, high in zip(names, params, lower, upper, strict=True):
        if not (math.isfinite(low) and math.isfinite(high)):
            continue
        near = 1e-3 * (high - low)
        if value - low <= near:
            found.append(f"{name} = {low:g} (its lower bound)")
        elif high - value <= near:
            found.append(f"{name} = {high:.3g} (its upper bound{', the lowest mean loss' if name == 'E' else ''})")
    return found


def _solve(x: np.ndarray, means: np.ndarray, start: np.ndarray) -> np.ndarray:
    from scipy.optimize import least_squares

    lower, upper = _bounds(means)
    fit = least_squares(lambda p: (_predict(p, x, len(means)) - means).ravel(), np.clip(start, lower + 1e-9,
                        upper - 1e-9), bounds=(lower, upper))
    return fit.x


def joint_fit(x: np.ndarray, table: dict[str, np.ndarray], baseline: str, rng: np.random.Generator | None,
              n_seeds: int, without_documents: list[dict[str, np.ndarray]] | None = None) -> JointFit:
    """The joint fit of every method's mean losses; per method k (its multiplier at 1 token per parameter),
    gamma, the fitted multiplier at FIT_AT tokens per parameter and, with a generator (enough seeds), bootstrap
    intervals; from MIN_SEEDS seeds the calibrated ones (the fit redone with each seed left out: it holds its
    coverage where the bootstrap percentiles do not, tests/study/test_calibrated.py) and gamma's Holm-adjusted
    p-value. `without_documents`: `table` with each group of held-out documents left out in turn; the fits of
    those add the evaluation set's variance to the calibrated intervals and p-values."""
    methods = [baseline, *(m for m in table if m != baseline)]
    stack = np.stack([table[m] for m in methods])  # (methods, budgets, seeds)
    means = stack.mean(axis=2)
    power = power_law(x, means[0]) or (0.8 * means.min(), 1.0, 0.3)
    start = np.r_[power[0], math.log(power[1]), power[2], [0.0, 0.0] * (len(methods) - 1)]
    params = _solve(x, means, start)
    boot = None
    if rng is not None:
        draws = rng.integers(0, n_seeds, size=(FIT_RESAMPLES, n_seeds))
        boot = np.array([_solve(x, stack[:, :, d].mean(axis=2), params) for d in draws])
    loo = None
    if n_seeds >= MIN_SEEDS:
        loo = np.array([_solve(x, stack[:, :, keep].mean(axis=2), params) for keep in leave_one_out(n_seeds)])
    by_documents = None
    if loo is not None and without_documents is not None:
        by_documents = np.array([_solve(x, np.stack([t[m] for m in methods]).mean(axis=2), params)
                                 for t in without_documents])  # (groups, parameters)
    residual = _predict(params, x, len(methods)) - means
    found, p_values = {}, {}
    for i, method in enumerate(methods[1:]):
        log_k, gamma = params[3 + 2 * i], params[4 + 2 * i]  # a resample's: boot[:, 3 + 2 i], boot[:, 4 + 2 i]
        own = None if boot is None else boot[:, 3 + 2 * i:5 + 2 * i]
        low, high = (None, None) if own is None else percentile_interval(own[:, 1])
        t_low = t_high = at_t_low = at_t_high = None
        if loo is not None:  # a left-out fit's: loo[:, 3 + 2 i] (log k), loo[:, 4 + 2 i] (gamma)
            gammas_by_documents = at_by_documents = None
            if by_documents is not None:
                gammas_by_documents = by_documents[:, 4 + 2 * i]
                at_by_documents = np.exp(by_documents[:, 3 + 2 * i] + gammas_by_documents * math.log(FIT_AT))
            t_low, t_high = map(float, jackknife_t(np.array(gamma), loo[:, 4 + 2 * i], documents=gammas_by_documents))
            log_at = loo[:, 3 + 2 * i] + loo[:, 4 + 2 * i] * math.log(FIT_AT)
            at_t_low, at_t_high = map(float, log_jackknife_t(np.exp(log_k + gamma * math.log(FIT_AT)), np.exp(log_at),
                                                             documents=at_by_documents))
            p_values[method] = jackknife_p(float(gamma), loo[:, 4 + 2 * i], documents=gammas_by_documents)
        found[method] = JointFitMethod(math.exp(log_k), Slope(float(gamma), low, high, t_low, t_high),
                                       *exp_linear((log_k, gamma), (1.0, math.log(FIT_AT)), own),
                                       at_t_low, at_t_high)
    adjusted = holm(p_values)
    found = {method: replace(row, p_holm=adjusted.get(method, math.nan)) for method, row in found.items()}
    # FIT_AT further than EXTRAPOLATION_LIMIT x past the fitted budgets: the fit's multiplier there is not stated
    return JointFit(float(params[0]), float(math.exp(params[1])), float(params[2]),
                    float(np.sqrt((residual ** 2).mean())), found, at_bounds(params, means, methods),
                    bool(EXTRAPOLATION_LIMIT * float(np.max(x)) >= FIT_AT))


