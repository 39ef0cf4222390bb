"""Multipliers that survive tuning: a branched sweep with a learning-rate axis (configs/study/lr_sweep_wiki.toml,
whose rule was written before its cells ran) read against the baseline at its best rate.

- The baseline's envelope: at every budget, its rate with the lowest mean loss over the seeds; the envelope is those
  means, made non-increasing (the curve of `curve.BaselineCurve`).
- Each method at its own best rate per budget (chosen the same way), and at the reference rate, as data
  multipliers on that envelope. Every best rate is chosen on the held-out data that scores it, which biases the
  baseline's envelope and each method's best loss low alike: the side whose rates tie more closely gains, so the
  comparison is not conservative either way. Where the rate axis's other values are the baseline's alone
  (baseline_only), each method is read at the one rate it trained: then only the baseline's envelope is biased
  low, and the comparison is conservative for the methods.
- Intervals: the calibrated one (study/calibrated.py), the rate choices redone with each seed left out; it holds
  its 95% coverage at five seeds where rates nearly tie (simulated: tests/study/test_tuning.py). Where every cell
  stores each held-out document's loss, the reading redone with each group of documents left out adds the
  evaluation set's variance (the rate choices redone there too).
- Verdict per method at the rule's budget, its best rate against the envelope: "survives tuning" if the interval,
  Holm-adjusted over the methods, lies above 1; "reversed" if below; otherwise "not shown". A best rate at the
  grid's edge is flagged: the optimum may lie outside the grid.
- The slope of the best-rate multiplier in the budget (gamma, log-log, as the untuned reading's), with the same
  calibrated interval (its coverage simulated beside the multipliers') and no verdict: the sweep's rule fixed a
  verdict at one budget only, and the slope was added after its cells ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .calibrated import holm, holm_verdict, jackknife_p, jackknife_t, log_jackknife_t
from .curve import BaselineCurve
from .fits import Slope, log_log_fit
from .multiplier import EXTRAPOLATION_LIMIT
from .records import CellResult
from .spec import Study
from .stats import MIN_SEEDS
from .sweep import DOCUMENT_GROUPS, Sweep, within_repeats

RATE_KEY = "optim.lr"


@dataclass(frozen=True)
class TunedPoint:
    """A method's multiplier at one budget on the baseline's envelope, with its calibrated interval, and where it
    read the envelope (`read_at` tokens per parameter; its measured span `curve_low` to `curve_high`): outside it
    `extrapolated`, more than EXTRAPOLATION_LIMIT x outside not `printable` (a bound instead), in `read_epochs`
    passes over the data, as an untuned reading's `multiplier.MultiplierPoint`."""

    label: str
    multiplier: float
    low: float | None
    high: float | None
    rate: str  # the rate it was read at (its best, or the reference)
    at_edge: bool  # that rate is the grid's lowest or highest
    read_at: float
    curve_low: float
    curve_high: float
    read_epochs: float | None  # the passes over the data at `read_at` (None: the cells do not say)

    @property
    def extrapolated(self) -> bool:
        return not self.curve_low <= self.read_at <= self.curve_high

    @property
    def printable(self) -> bool:
        return self.read_at > 0 and max(self.read_at / self.curve_high, self.curve_low / self.read_at) <= \
            EXTRAPOLATION_LIMIT


@dataclass(frozen=True)
class TunedMethod:
    method: str
    rates: list[str]  # the rates it trained: one where the study tunes the baseline alone (baseline_only rates)
    best: list[TunedPoint]  # at its own best rate per budget
    reference: list[TunedPoint]  # at the reference rate
    p_holm: float  # at the verdict budget, its best rate: Holm-adjusted over the methods
    verdict: str | None
    gamma: Slope  # of log(best-rate multiplier) per log budget, with its calibrated interval (t_low, t_high)
    p: float = math.nan  # p_holm before the adjustment


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
    documents: bool = False  # the intervals hold the held-out documents' variance too
    documents_note: str = ""  # why not (Sweep.documents_note)

    @property
    def baseline_alone(self) -> bool:
        """Only the baseline is tuned: every other method trained at one rate (the axis's other values are the
        baseline's, baseline_only)."""
        return bool(self.methods) and all(len(m.rates) == 1 for m in self.methods)


def rate_axis(study: Study):
    """The study's learning-rate axis (a non-branched axis over optim.lr), or None."""
    return next((axis for axis in study.axes if axis.key == RATE_KEY and not axis.branches), None)


def _means(table: np.ndarray) -> np.ndarray:
    """Mean over the seeds of each budget's row (budgets, seeds); nan where the row has no cell, inf where a run
    diverged (so that its rate is never the best)."""
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


def envelope_multipliers(x: np.ndarray, by_rate: dict[str, dict[str, np.ndarray]], baseline: str, method: str,
                         reference: str, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(best-rate multipliers, reference-rate multipliers, the method's best rates, the baseline's) on the
    baseline's envelope, from the loss tables (budgets, seeds) per rate and method with the seeds `keep` (indices):
    the whole reading, rate choices included, so that leaving a seed out redoes the choices."""
    envelope, baseline_rates = _best({r: t[baseline][:, keep] for r, t in by_rate.items()})
    finite = np.isfinite(envelope)
    curve = BaselineCurve.fit(x[finite], envelope[finite])
    best, rates = _best({r: t[method][:, keep] for r, t in by_rate.items() if method in t})
    at_reference = _means(by_rate[reference][method][:, keep])

    def read(means: np.ndarray) -> np.ndarray:  # nan where every rate diverged
        return np.array([curve.tokens_for(m) if math.isfinite(m) else math.nan for m in means]) / x

    return read(best), read(at_reference), rates, baseline_rates


@dataclass(frozen=True)
class RateTables:
    """The losses over the budgets and seeds every rate has: budget labels (ascending), their tokens per parameter,
    the seeds, per rate each method's losses (budgets, seeds), and the same once per group of held-out documents
    left out (None unless every cell stores its documents' losses)."""

    labels: list[str]
    x: np.ndarray
    seeds: list[int]
    losses: dict[str, dict[str, np.ndarray]]
    without_documents: list[dict[str, dict[str, np.ndarray]]] | None


def _rate_tables(study: Study, results: list[CellResult], rate_key: str, reference: str) -> RateTables | None:
    """The sweep's `RateTables`; None where a rate lacks the baseline, the reference rate or a second rate is
    missing, or under three budgets or no seed are shared."""
    by_rate, without_by_rate = {}, {}
    for sweep in Sweep(study, tuple(results)).models().values():
        loss_table = sweep.loss_table
        if study.baseline not in loss_table.losses:
            return None
        rate = sweep.results[0].setting[rate_key]
        by_rate[rate], without_by_rate[rate] = loss_table, sweep.documents_left_out()
    if reference not in by_rate or len(by_rate) < 2:
        return None
    labels = [label for label in by_rate[reference].labels if all(label in t.labels for t in by_rate.values())]
    seeds = sorted(set.intersection(*(set(t.seeds) for t in by_rate.values())))
    if len(labels) < 3 or not seeds:
        return None
    x = np.array([by_rate[reference].x[by_rate[reference].labels.index(label)] for label in labels])
    shared = {}
    for rate, loss_table in by_rate.items():
        rows = [loss_table.labels.index(label) for label in labels]
        columns = [loss_table.seeds.index(s) for s in seeds]
        shared[rate] = np.ix_(rows, columns)
    losses = {rate: {m: t[shared[rate]] for m, t in loss_table.losses.items()} for rate, loss_table in by_rate.items()}
    stored = {rate: without for rate, without in without_by_rate.items() if without is not None}
    documents = None
    if len(stored) == len(without_by_rate):
        documents = [{rate: {m: t[shared[rate]] for m, t in without[group].items()} for rate, without in stored.items()}
                     for group in range(DOCUMENT_GROUPS)]
    return RateTables(labels, x, seeds, losses, documents)


def _tuned_points(k: np.ndarray, loo: list[np.ndarray], chosen: list[str], labels: list[str], rates: list[str],
                  documents: list[np.ndarray], x: np.ndarray, span: tuple[float, float],
                  epochs_per_x: float | None) -> list[TunedPoint]:
    """A method's multipliers `k` per budget (tokens per parameter `x`), each with its calibrated interval from the
    leave-one-seed-out multipliers `loo` (none without) and those with each group of held-out documents left out
    (`documents`, none without), read at the rates `chosen` on an envelope measured over `span`."""
    out = []
    for i, label in enumerate(labels):
        low = high = None
        if loo and not math.isnan(k[i]):
            lo, hi = log_jackknife_t(k[i], np.array([left_out[i] for left_out in loo]),
                                     documents=np.array([left_out[i] for left_out in documents]) if documents else None)
            low, high = float(lo), float(hi)
        read = float(k[i] * x[i])
        out.append(TunedPoint(label, float(k[i]), low, high, chosen[i], chosen[i] in (rates[0], rates[-1]), read,
                              *span, read * epochs_per_x if epochs_per_x else None))
    return out


def _slope(x: np.ndarray, k: np.ndarray, loo: list[np.ndarray], documents: list[np.ndarray]) -> Slope:
    """The log-log slope of the multipliers `k` over the budgets `x`, with its calibrated interval from the slopes
    of the leave-one-seed-out multipliers `loo` and the documents-left-out ones (none without)."""
    gamma = log_log_fit(x, k)[0]
    if not loo or math.isnan(gamma):
        return Slope(gamma)
    low, high = jackknife_t(np.array(gamma), np.array([log_log_fit(x, left_out)[0] for left_out in loo]),
                            documents=np.array([log_log_fit(x, left_out)[0] for left_out in documents])
                            if documents else None)
    if not (np.isfinite(low) and np.isfinite(high)):
        return Slope(gamma)
    return Slope(gamma, t_low=float(low), t_high=float(high))


REFERENCE_RATE = "2e-3"  # the rate every untuned sweep trained at, which a tuned reading compares with


def tuned_multipliers(study: Study, results: list[CellResult], reference: str = REFERENCE_RATE,
                      verdict_at: str | None = None) -> Tuning | None:
    """The tuned reading of a learning-rate sweep; None without a rate axis, a branched axis and one seed every rate
    has at every budget. `verdict_at`: the budget of the verdict, by default the longest that every method trains."""
    axis, branch = rate_axis(study), study.branch_axis
    if axis is None or branch is None:
        return None
    shared = _rate_tables(study, results, axis.name, reference)
    if shared is None:
        return None
    labels, x, seeds, tables = shared.labels, shared.x, shared.seeds, shared.losses
    if verdict_at is None:
        every_method = [label for label in branch.values if label not in branch.baseline_only]
        verdict_at = max(every_method, key=lambda label: branch.values[label])
    n = len(seeds)
    everyone = np.arange(n)
    leave_out = [np.delete(everyone, j) for j in range(n)] if n >= MIN_SEEDS else []
    rates = [r for r in axis.values if r in tables]
    methods = [m for m in study.methods if m != study.baseline and m in tables[reference]]
    found, p_values, gammas = [], {}, {}
    envelope, baseline_rates = _best({r: t[study.baseline] for r, t in tables.items()})
    span = (float(x[np.isfinite(envelope)][0]), float(x[np.isfinite(envelope)][-1]))  # where the envelope is measured
    epochs_per_x = Sweep(study, tuple(results)).epochs_per_x
    fitted = within_repeats(x, epochs_per_x)  # as every gamma: the budgets trained within REPEATS_FLAG epochs
    for method in methods:
        best, at_reference, best_rates, _ = envelope_multipliers(x, tables, study.baseline, method, reference, everyone)
        loo = [envelope_multipliers(x, tables, study.baseline, method, reference, keep) for keep in leave_out]
        by_documents = [envelope_multipliers(x, without, study.baseline, method, reference, everyone)
                        for without in shared.without_documents] if loo and shared.without_documents else []
        best_points = _tuned_points(best, [values[0] for values in loo], best_rates, labels, rates,
                                    [values[0] for values in by_documents], x, span, epochs_per_x)
        found.append((method, best_points, _tuned_points(at_reference, [values[1] for values in loo],
                                                         [reference] * len(labels), labels, rates,
                                                         [values[1] for values in by_documents], x, span,
                                                         epochs_per_x)))
        gammas[method] = _slope(x[fitted], best[fitted], [values[0][fitted] for values in loo],
                                [values[0][fitted] for values in by_documents])
        if loo and verdict_at in labels:
            i = labels.index(verdict_at)
            p_values[method] = jackknife_p(math.log(best[i]), np.log([values[0][i] for values in loo]),
                                           np.log([values[0][i] for values in by_documents]) if by_documents else None)
    adjusted = holm(p_values) if p_values else {}
    out = []
    for method, best_points, reference_points in found:
        p = adjusted.get(method, math.nan)
        point = next((q for q in best_points if q.label == verdict_at), None)
        verdict = None if point is None else holm_verdict(p, math.log(point.multiplier),
                                                          ("survives tuning", "not shown", "reversed"))
        trained = [r for r in rates if method in tables[r]]
        out.append(TunedMethod(method, trained, best_points, reference_points, p, verdict, gammas[method],
                               p_values.get(method, math.nan)))
    return Tuning(rates, reference, labels, x, seeds, baseline_rates, out, verdict_at,
                  shared.without_documents is not None, Sweep(study, tuple(results)).documents_note)


