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
  gammas say more about the misfit than about the methods.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np

from .calibrated import holm, jackknife_p, jackknife_t, log_jackknife_t, verdict
from .records import CellResult
from .spec import Study, setting_label
from .stats import CONFIDENCE, MIN_SEEDS
from .trend import tokens_per_parameter

RESAMPLES = 2000
FIT_RESAMPLES = 400  # the joint fit is a nonlinear least squares: fewer resamples, each warm-started
EXTRAPOLATION_LIMIT = 2.0
REPEATS_FLAG = 2.0
MIN_BUDGETS = 3  # a multiplier reads the baseline's curve through this many measured budgets at least
MIN_FIT_BUDGETS = 3  # the joint fit's budgets (at most REPEATS_FLAG epochs) fewer than this: no joint fit
FIT_AT = 20.0  # the fitted multiplier is stated at 20 tokens per parameter, about compute-optimal


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
    return tuple(float(p) for p in params)


def loss_table(study: Study, results: list[CellResult]
               ) -> tuple[list[str], np.ndarray, list[int], dict[str, np.ndarray]]:
    """Budget labels (ascending), their tokens per parameter, the table's seeds, and per method its losses as an
    array (budgets, seeds), nan where the method has none.

    The seeds are those with every method's cell at every budget they all train within REPEATS_FLAG epochs (the
    budgets the verdict reads). A method's losses at any other budget enter once every one of those seeds has its
    cell there; until then that budget is the baseline's alone (its curve), or left out while the baseline too
    lacks a seed's cell, so that cells still to come never cost the table a seed."""
    x_of = tokens_per_parameter(study, results)
    axis = study.branch_axis
    loss = {(r.method, r.setting[axis.name], r.seed): r.val_loss for r in results}
    methods = [m for m in study.methods if any(key[0] == m for key in loss)]
    epochs_per_x = epochs_per_token_per_parameter(study, results)

    def trains_all(label: str) -> bool:
        return all(study.trains({axis.name: label}, m) for m in methods)

    shared = [label for label in x_of if trains_all(label)]
    read = [label for label in shared if within_repeats(x_of[label], epochs_per_x)]
    seeds = [s for s in sorted({key[2] for key in loss})
             if all((m, label, s) in loss for label in read or shared for m in methods)]

    def complete(method: str, label: str) -> bool:
        return all((method, label, s) in loss for s in seeds)

    labels = sorted((label for label in x_of if complete(study.baseline, label)), key=x_of.get)
    table = {m: np.array([[loss[m, label, s] if complete(m, label) else math.nan for s in seeds]
                          for label in labels]).reshape(len(labels), len(seeds))
             for m in methods}
    return labels, np.array([x_of[label] for label in labels]), seeds, table


def first_seed_gaps(study: Study, results: list[CellResult]) -> str:
    """What the study's first seed with cells still lacks for a multiplier, per method, e.g. "seed 0 lacks moda at 5,
    10, 20; vanilla at 30" (`depthattn study` on the study runs them)."""
    axis = study.branch_axis
    if axis is None:
        return "no branched axis"
    if not results:
        return "no cells yet"
    seed = min(r.seed for r in results)
    have = {(r.method, r.setting[axis.name]) for r in results if r.seed == seed}
    lacking: dict[str, list[str]] = {}
    for cell in study.cells([seed]):
        if (cell.method, cell.setting[axis.name]) not in have:
            lacking.setdefault(cell.method, []).append(cell.setting[axis.name])
    if not lacking:
        return f"seed {seed} has every cell"
    return f"seed {seed} lacks " + "; ".join(f"{m} at {', '.join(lacking[m])}" for m in study.methods if m in lacking)


def data_multipliers(x: np.ndarray, curve: BaselineCurve, method: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per budget: the data multiplier of mean losses `method` (budgets, seeds) over the baseline's `curve`, and the
    tokens per parameter where that curve was read."""
    read = np.array([curve.tokens_for(loss) for loss in method.mean(axis=1)])
    return read / x, read


def percentile_interval(draws: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(draws, [0.025, 0.975], method="inverted_cdf")  # no interpolation between inf values
    return float(low), float(high)


@dataclass(frozen=True)
class SeedBootstrap:
    """A branched sweep's losses, the baseline's curve and every other method's data multipliers (and where they
    read that curve), with the same from RESAMPLES resamples of the seeds where there are MIN_SEEDS of them."""

    labels: list[str]  # budgets, ascending
    x: np.ndarray  # their tokens per parameter
    seeds: list[int]
    table: dict[str, np.ndarray]  # method -> losses (budgets, seeds)
    epochs_per_x: float | None
    curve: BaselineCurve
    k: dict[str, np.ndarray]  # method -> (budgets,)
    read: dict[str, np.ndarray]  # method -> the tokens per parameter where the baseline reaches its loss
    boot: dict[str, np.ndarray] | None  # method -> (RESAMPLES, budgets); None below MIN_SEEDS seeds
    loo: dict[str, np.ndarray] | None  # method -> (seeds, budgets), each seed left out once; None below MIN_SEEDS
    rng: np.random.Generator  # after the resamples, for draws that follow them (the joint fit's)
    documents: dict[str, np.ndarray] | None = None  # method -> (DOCUMENT_GROUPS, budgets), each group of held-out
    # documents left out once; None unless every cell stores its documents' losses

    @property
    def in_fit(self) -> np.ndarray:
        """The budgets that pass over the data at most REPEATS_FLAG times (the ones the fits use)."""
        return within_repeats(self.x, self.epochs_per_x)


def seed_bootstrap(study: Study, results: list[CellResult], seed: int = 0) -> SeedBootstrap | None:
    """None without a branched axis, three budgets and one seed that every method has at every budget."""
    if study.branch_axis is None:
        return None
    labels, x, seeds, table = loss_table(study, results)
    if len(labels) < MIN_BUDGETS or not seeds or study.baseline not in table:
        return None
    base = table[study.baseline]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(seeds), size=(RESAMPLES, len(seeds))) if len(seeds) >= MIN_SEEDS else None
    curve = BaselineCurve.fit(x, base.mean(axis=1))
    methods = [m for m in table if m != study.baseline]
    k, read = {}, {}
    for method in methods:
        k[method], read[method] = data_multipliers(x, curve, table[method])
    others = {m: table[m] for m in methods}
    boot = resampled_multipliers(x, base, others, draws) if draws is not None else None
    loo = resampled_multipliers(x, base, others, leave_one_out(len(seeds))) if draws is not None else None
    documents = None
    without = documents_left_out(study, results, labels, seeds, table) if draws is not None else None
    if without is not None:
        every_seed = np.arange(len(seeds))[None, :]
        rows = [resampled_multipliers(x, t[study.baseline], {m: t[m] for m in methods}, every_seed) for t in without]
        documents = {m: np.concatenate([row[m] for row in rows]) for m in methods}
    return SeedBootstrap(labels, x, seeds, table, epochs_per_token_per_parameter(study, results), curve, k, read,
                         boot, loo, rng, documents)


DOCUMENT_GROUPS = 10  # the held-out documents' groups (every 10th document from the g-th) of the jackknife


def documents_left_out(study: Study, results: list[CellResult], labels: list[str], seeds: list[int],
                       table: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]] | None:
    """The loss table once per group of held-out documents, that group left out of every cell's loss (its nats and
    tokens taken out of the whole split's); None unless every cell of the table stores its documents' losses
    (`val_documents`)."""
    axis = study.branch_axis
    cells = {(r.method, r.setting[axis.name], r.seed): r for r in results}
    kept = {}
    for method, losses in table.items():
        for (i, j), value in np.ndenumerate(losses):
            if math.isnan(value):
                continue
            documents = cells[method, labels[i], seeds[j]].record.get("val_documents")
            if documents is None:
                return None
            kept[method, i, j] = (np.asarray(documents["nats"]), np.asarray(documents["tokens"]))
    out = []
    for group in range(DOCUMENT_GROUPS):
        without = {m: t.copy() for m, t in table.items()}
        for (method, i, j), (nats, tokens) in kept.items():
            left = slice(group, None, DOCUMENT_GROUPS)
            total = tokens.sum()
            without[method][i, j] = (table[method][i, j] * total - nats[left].sum()) / (total - tokens[left].sum())
        out.append(without)
    return out


def leave_one_out(n: int) -> np.ndarray:
    """(n, n - 1): the seed indices with each one left out in turn."""
    return np.array([[i for i in range(n) if i != j] for j in range(n)])


def resampled_multipliers(x: np.ndarray, base: np.ndarray, tables: dict[str, np.ndarray], draws: np.ndarray
                          ) -> dict[str, np.ndarray]:
    """Per method, its data multipliers (len(draws), budgets) with the seeds of each row of `draws` (indices into
    the seed axis of `base` and `tables`, (budgets, seeds)): the baseline's curve is refitted from the same seeds."""
    # a resample's curve depends only on which seeds it drew: a few hundred distinct draws among RESAMPLES
    drawn = [tuple(sorted(d)) for d in draws]
    fitted = {drew: BaselineCurve.fit(x, base[:, drew].mean(axis=1)) for drew in set(drawn)}
    curves = [fitted[drew] for drew in drawn]
    return {m: np.array([data_multipliers(x, c, t[:, d])[0] for c, d in zip(curves, draws)])
            for m, t in tables.items()}


def multipliers(study: Study, results: list[CellResult], flops_ratio: dict[str, float] | None = None,
                seed: int = 0) -> dict | None:
    """Every method's data (and, given each method's FLOPs per token over the baseline's, compute) multiplier at
    each budget, with bootstrap intervals where the seeds can carry them; None without a branched axis, three
    budgets and one seed that every method has at every budget."""
    sample = seed_bootstrap(study, results, seed)
    if sample is None:
        return None
    labels, x, table, epochs_per_x = sample.labels, sample.x, sample.table, sample.epochs_per_x
    fitted = sample.in_fit
    rows = []
    for method, k in sample.k.items():
        read, boot = sample.read[method], sample.boot[method] if sample.boot else None
        loo = sample.loo[method] if sample.loo else None
        documents = sample.documents[method] if sample.documents else None
        points = [multiplier_point(labels, x, i, k, read, epochs_per_x, boot, loo, documents)
                  for i in range(len(labels))
                  if not np.isnan(table[method][i]).all()]  # not a budget only the baseline trains
        gamma, log_c = log_log_fit(x[fitted], k[fitted])
        trend = {"gamma": gamma, "log_c": log_c, "low": None, "high": None, "verdict": None, "draws": None,
                 "t_low": None, "t_high": None, "t_verdict": None, "p": math.nan}
        if boot is not None:
            trend["draws"] = np.array([log_log_fit(x[fitted], b[fitted]) for b in boot])  # (RESAMPLES, 2)
            trend["low"], trend["high"] = percentile_interval(trend["draws"][:, 0])
            trend["verdict"] = verdict(trend["low"], trend["high"])
            gammas = np.array([log_log_fit(x[fitted], b[fitted])[0] for b in loo])  # (seeds,)
            by_documents = None if documents is None else np.array(
                [log_log_fit(x[fitted], b[fitted])[0] for b in documents])  # (DOCUMENT_GROUPS,)
            low, high = jackknife_t(np.array(gamma), gammas, documents=by_documents)
            trend["t_low"], trend["t_high"] = float(low), float(high)
            trend["t_verdict"], trend["p"] = verdict(low, high), jackknife_p(gamma, gammas)
        rows.append({"method": method, "flops_ratio": (flops_ratio or {}).get(method), "points": points,
                     "trend": trend})
    adjusted = holm({row["method"]: row["trend"]["p"] for row in rows})  # the family: every method's gamma
    for row in rows:
        trend, p = row["trend"], adjusted[row["method"]]
        trend["p_holm"] = p
        trend["holm_verdict"] = None if math.isnan(p) else "holds" if p >= 1 - CONFIDENCE else (
            "grows" if trend["gamma"] > 0 else "fades")
    stacked = np.isnan(np.stack([table[m] for m in sample.k]))  # (methods, budgets, seeds), the baseline's left out
    shown = ~stacked.all(axis=(0, 2))  # some method has points: not a budget only the baseline trains (so far)
    fitted &= ~stacked.any(axis=(0, 2))  # every method has its cells
    return {"labels": [label for label, keep in zip(labels, shown) if keep], "x": x[shown].tolist(),
            "seeds": sample.seeds, "baseline": study.baseline, "rows": rows, "documents": sample.documents is not None,
            "fit": joint_fit(x[fitted], {m: t[fitted] for m, t in table.items()}, study.baseline,
                             sample.rng if sample.boot is not None else None, len(sample.seeds))
            if fitted.sum() >= MIN_FIT_BUDGETS else None,
            "fit_budgets": [label for label, keep in zip(labels, fitted) if keep],
            "curve": sample.curve.power}


def multiplier_point(labels: list[str], x: np.ndarray, i: int, k: np.ndarray, read: np.ndarray,
                     epochs_per_x: float | None, boot: np.ndarray | None, loo: np.ndarray | None = None,
                     documents: np.ndarray | None = None) -> dict:
    """A method's multiplier at budget i (of `labels` at tokens per parameter `x`) with where it read the
    baseline's curve (`read`): outside the measured budgets, how far, in how many epochs; its interval from the
    resamples `boot` (RESAMPLES, budgets), if any, and its calibrated one from the leave-one-seed-out values `loo`
    (seeds, budgets), and where present the held-out documents' (`documents`, (groups, budgets)). `format_multiplier`
    writes it."""
    outside = max(read[i] / x[-1], x[0] / read[i]) if read[i] > 0 else math.inf
    point = {"label": labels[i], "tokens_per_parameter": float(x[i]), "multiplier": float(k[i]),
             "read_at": float(read[i]), "extrapolated": not x[0] <= read[i] <= x[-1],
             "printable": bool(outside <= EXTRAPOLATION_LIMIT) if not math.isnan(read[i]) else False,
             "read_epochs": epochs_per_x * read[i] if epochs_per_x else None,
             "curve_low": float(x[0]), "curve_high": float(x[-1]), "low": None, "high": None}
    if boot is not None:
        point["low"], point["high"] = percentile_interval(boot[:, i])
    point["t_low"] = point["t_high"] = None
    if loo is not None:
        low, high = log_jackknife_t(k[i], loo[:, i], documents=None if documents is None else documents[:, i])
        point["t_low"], point["t_high"] = float(low), float(high)
    return point


def log_log_fit(x: np.ndarray, k: np.ndarray) -> tuple[float, float]:
    """(gamma, log c) of k = c x^gamma, least squares in log-log over the finite multipliers (nan with fewer than
    two): the slope of a multiplier in the budget here, in depth on the depth axis."""
    keep = np.isfinite(k) & (k > 0)
    if keep.sum() < 2:
        return math.nan, math.nan
    gamma, log_c = np.polyfit(np.log(x[keep]), np.log(k[keep]), 1)
    return float(gamma), float(log_c)


def groups(study: Study, results: list[CellResult]) -> dict[str, list[CellResult]]:
    """A branched study's results per setting of its other axes (a ladder's sizes), by that setting's label."""
    axis = study.branch_axis
    out = {}
    for result in results:
        rest = {name: label for name, label in result.setting.items() if name != axis.name}
        out.setdefault(setting_label(rest), []).append(result)
    return out


def within_repeats(x: float | np.ndarray, epochs_per_x: float | None) -> np.ndarray:
    """Whether budgets `x` (tokens per parameter) pass over the data at most REPEATS_FLAG times; all do when the
    cells do not say how many epochs they trained."""
    return np.asarray(x) * (epochs_per_x or 0) <= REPEATS_FLAG


def epochs_per_token_per_parameter(study: Study, results: list[CellResult]) -> float | None:
    """Passes over the training data per token per parameter of the baseline model (from the cells' data_epochs)."""
    x_of = tokens_per_parameter(study, results)
    axis = study.branch_axis
    for r in results:
        if r.method == study.baseline and r.data_epochs is not None:
            return r.data_epochs / x_of[r.setting[axis.name]]
    return None


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
    for name, value, low, high in zip(names, params, lower, upper):
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
              n_seeds: int) -> dict:
    """The joint fit of every method's mean losses; per method k (its multiplier at 1 token per parameter),
    gamma, the fitted multiplier at FIT_AT tokens per parameter and, with a generator (enough seeds), bootstrap
    intervals and the verdict on gamma."""
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
    residual = _predict(params, x, len(methods)) - means
    out = {"E": float(params[0]), "B": float(math.exp(params[1])), "beta": float(params[2]),
           "rms_residual": float(np.sqrt((residual ** 2).mean())), "methods": {},
           "at_bounds": at_bounds(params, means, methods),
           # FIT_AT further than EXTRAPOLATION_LIMIT x past the fitted budgets: the fit's multiplier there is not stated
           "at_printable": bool(FIT_AT <= EXTRAPOLATION_LIMIT * float(np.max(x)))}
    for i, method in enumerate(methods[1:]):
        log_k, gamma = params[3 + 2 * i], params[4 + 2 * i]
        row = {"k": math.exp(log_k), "gamma": float(gamma), "at": math.exp(log_k + gamma * math.log(FIT_AT)),
               "gamma_low": None, "gamma_high": None, "at_low": None, "at_high": None, "verdict": None}
        if boot is not None:
            row["gamma_low"], row["gamma_high"] = percentile_interval(boot[:, 4 + 2 * i])
            row["at_low"], row["at_high"] = percentile_interval(np.exp(boot[:, 3 + 2 * i] + boot[:, 4 + 2 * i]
                                                             * math.log(FIT_AT)))
            row["verdict"] = ("grows" if row["gamma_low"] > 0 else "fades" if row["gamma_high"] < 0 else "holds")
        out["methods"][method] = row
    return out


def format_multiplier(point: dict, flops_ratio: float = 1.0, interval: str = "") -> str:
    """'1.23x [1.10, 1.41]' with † for an extrapolation and ‡ where the baseline's curve is read past
    REPEATS_FLAG epochs; the limit where it reads too far past the measured budgets. `interval`: "" the
    percentile bootstrap's, "t_" the calibrated one's."""
    if not point["printable"]:  # a bound instead: the limit of the curve that may be read
        if math.isnan(point["read_at"]):
            return "—"
        x, read, limit = point["tokens_per_parameter"], point["read_at"], EXTRAPOLATION_LIMIT
        bound = point["curve_high"] * limit if read > x else point["curve_low"] / limit
        return f"{'>' if read > x else '<'} {bound / x / flops_ratio:.2f}x†"
    text = f"{point['multiplier'] / flops_ratio:.2f}x"
    low, high = point.get(f"{interval}low"), point.get(f"{interval}high")
    if low is not None:
        text += f" [{low / flops_ratio:.2f}, {high / flops_ratio:.2f}]"
    if point["extrapolated"]:
        text += "†"
    if point["read_epochs"] is not None and point["read_epochs"] > REPEATS_FLAG:
        text += "‡"
    return text
