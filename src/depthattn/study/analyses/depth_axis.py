"""The depth axis: each method's multiplier against the model's depth, from budget sweeps that differ only in
depth (configs/analysis/depth_axis.toml names them and states the rule, written before its deepest sweep's cells ran).

- Each sweep's data multipliers as `depthattn.study.multiplier` computes them: against that sweep's own baseline
  curve, with the same seed bootstrap. The sweeps are separate runs, so a resample draws each sweep's seeds on its
  own: resample r of every sweep, each sweep's resamples in an order of its own, make resample r of the depth fits.
- At every budget that all sweeps measure: delta, the least-squares slope of log multiplier against log depth, with
  the 95% percentile interval of the resamples: above zero the multiplier **grows** with depth, below zero it
  **fades**, across zero it **holds**. No interval and no verdict unless every sweep has MIN_SEEDS seeds.
- The surface log k = a + gamma log x + delta log L (x tokens per parameter, L layers), least squares over each
  sweep's budgets that pass over its data at most REPEATS_FLAG times (the budgets the sweeps' own verdicts use),
  with the same resamples: its delta is the verdict on depth, and it is what a depth-informed prediction reads.
  Read more than EXTRAPOLATION_LIMIT times past the measured depths, a prediction is marked as an extrapolation.
- Calibrated intervals: the grouped jackknife t, each seed position left out of every sweep at once; where every
  sweep's cells store each held-out document's loss, the fits redone with each group of documents left out of every
  sweep add the evaluation set's variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..calibrated import jackknife_t
from ..fits import Slope, exp_linear, log_log_fit, log_surface_fit, percentile_interval
from ..multiplier import MultiplierPoint, point
from ..spec import Study
from ..store import CellStore
from ..sweep import DOCUMENT_GROUPS, REPEATS_FLAG, SeedBootstrap, one_model, read_sweeps, sweep_depth, within_repeats


def _apart_from_depth(study: Study) -> dict:
    """The data, model and optimiser settings of a sweep's base setting, its layer count left out, as flat keys."""
    config = study.setting_config(study.settings()[0])
    flat = {f"{section}.{key}": value for section in ("data", "model", "optim")
            for key, value in config.get(section, {}).items() if key != "overrides"}
    flat.update({f"model.overrides.{key}": value for key, value in config.get("model", {}).get("overrides", {}).items()
                 if key != "num_hidden_layers"})
    return flat


@dataclass
class DepthAxis:
    """Budget sweeps of the same methods and budgets at different depths."""

    title: str
    sweeps: list[Study]
    config_file: str

    @classmethod
    def load(cls, path: str | Path, results: str | None = None) -> DepthAxis:
        title, sweeps, path = read_sweeps(path, "depth_axis", "two or more study configs (paths relative to it) "
                                          "that differ only in depth", lambda n: n >= 2, results)
        depths = [sweep_depth(s) for s in sweeps]
        if len(set(depths)) != len(depths):
            raise ValueError(f"{path}: two sweeps have the same depth ({depths}); each sweep is one depth")
        first = _apart_from_depth(sweeps[0])
        for sweep in sweeps[1:]:
            other = _apart_from_depth(sweep)
            differ = sorted(key for key in set(first) | set(other) if first.get(key) != other.get(key))
            if differ:
                raise ValueError(f"{path}: {sweeps[0].config_file} and {sweep.config_file} differ in more than depth "
                                 f"({', '.join(differ)}): a depth axis reads what depth alone changes")
        return cls(title, sweeps, str(path))


@dataclass(frozen=True)
class AtDepth:
    """One sweep's multipliers and their resamples, at its depth; `x_scale` turns its budgets' tokens per parameter
    into the unit a fit reads them in (1: as the sweep counts them)."""

    depth: int
    sample: SeedBootstrap
    x_scale: float = 1.0


@dataclass(frozen=True)
class DepthBudget:
    """A method's multiplier at one budget at each depth (`k`; `points` as each sweep's own report states them),
    and delta, the slope of log multiplier against log depth, with its intervals."""

    label: str
    x: float
    k: list[float]
    points: list[MultiplierPoint]
    delta: Slope


@dataclass(frozen=True)
class DepthSurface:
    """log k = a + gamma log x + delta log L over every sweep's budgets within REPEATS_FLAG epochs: (a, gamma,
    delta), the resamples' (`draws`, (RESAMPLES, 3); None below MIN_SEEDS seeds) and delta with its intervals."""

    coefficients: tuple[float, float, float]
    draws: np.ndarray | None
    delta: Slope

    def at(self, x: float, depth: float) -> tuple[float, float | None, float | None]:
        """The multiplier at x tokens per parameter and `depth` layers, with the resamples' 95% interval."""
        return exp_linear(self.coefficients, (1.0, math.log(x), math.log(depth)), self.draws)


@dataclass(frozen=True)
class InteractionSurface:
    """The surface with a budget x depth term: (a, gamma, delta, eta), eta with its calibrated interval, and the
    slope in depth delta + eta log x at each of INTERACTION_AT with its calibrated interval."""

    coefficients: tuple[float, float, float, float]
    eta: Slope
    delta_at: dict[float, Slope]


@dataclass(frozen=True)
class DepthMethod:
    budgets: list[DepthBudget]
    surface: DepthSurface
    interaction: InteractionSurface


@dataclass(frozen=True)
class DepthTrend:
    """Per method its `DepthMethod`, at the sweeps' `depths` with their seed counts; `missing`: the sweeps without
    enough cells yet, each with what its first seed lacks (then nothing is fitted)."""

    missing: dict[str, str]
    methods: dict[str, DepthMethod]
    depths: list[int] | None = None
    labels: list[str] | None = None
    seeds: list[int] | None = None
    documents: bool = False  # the calibrated intervals hold the held-out documents' variance too


def independent_resamples(sweeps: list[AtDepth]) -> list[AtDepth]:
    """The sweeps with each one's resamples in an order of its own (a fixed permutation per sweep after the first).
    Every sweep draws its seeds from the same generator, so resample r would otherwise pick the same seed positions
    in every sweep; reordered, resample r of the depth fits combines independent draws, and each sweep keeps the
    resamples (and intervals) of its own report."""
    out = sweeps[:1]
    for j, sweep in enumerate(sweeps[1:], start=1):
        draws = sweep.sample.boot
        if draws is not None:
            order = np.random.default_rng(j).permutation(len(next(iter(draws.values()))))
            draws = {method: d[order] for method, d in draws.items()}
        out.append(replace(sweep, sample=replace(sweep.sample, boot=draws)))
    return out


INTERACTION_AT = (1.0, 10.0, 20.0)  # tokens per parameter where the interaction surface's slope in depth is stated


def _interaction_surface(sweeps: list[AtDepth], method: str, groups: int | None) -> InteractionSurface:
    """The surface with a budget x depth term (configs/analysis/depth_axis.toml's primary surface since
    2026-12-05)."""
    coefficients = log_surface_fit(_surface_points(sweeps, method), interaction=True)
    delta_at = {x: float(coefficients[2] + coefficients[3] * math.log(x)) for x in INTERACTION_AT}
    c = [float(value) for value in coefficients]
    fitted = (c[0], c[1], c[2], c[3])
    if not groups:
        return InteractionSurface(fitted, Slope(float(coefficients[3])),
                                  {x: Slope(delta) for x, delta in delta_at.items()})
    loo, by_documents = _left_out_fits(sweeps, groups, lambda **left: log_surface_fit(
        _surface_points(sweeps, method, **left), interaction=True))
    eta = Slope(float(coefficients[3]), *_calibrated(coefficients[3], loo[:, 3], _column(by_documents, [0, 0, 0, 1])))
    return InteractionSurface(fitted, eta, {
        x: Slope(delta, *_calibrated(delta, loo[:, 2] + loo[:, 3] * math.log(x),
                                     _column(by_documents, [0, 0, 1, math.log(x)])))
        for x, delta in delta_at.items()})


def _left_out_fits(sweeps: list[AtDepth], groups: int, fit) -> tuple[np.ndarray, np.ndarray | None]:
    """`fit(left_out=j)` for each seed position j, and `fit(documents_left_out=g)` for each group g of held-out
    documents where every sweep's cells store them (else None): each (groups, ...)."""
    loo = np.array([fit(left_out=j) for j in range(groups)])
    if not _documents_stored(sweeps):
        return loo, None
    return loo, np.array([fit(documents_left_out=g) for g in range(DOCUMENT_GROUPS)])


def _documents_stored(sweeps: list[AtDepth]) -> bool:
    """Whether every sweep's cells store each held-out document's loss."""
    return all(s.sample.documents is not None for s in sweeps)


def _column(fits: np.ndarray | None, features: np.ndarray | list[float]) -> np.ndarray | None:
    """The value with coefficients `features` of each fit (fits, coefficients); None without fits."""
    return None if fits is None else fits @ np.asarray(features)


def _calibrated(value: float, leave_one_out: np.ndarray, documents: np.ndarray | None = None
                ) -> tuple[None, None, float, float]:
    """A `Slope`'s intervals with only the calibrated one: (None, None, t_low, t_high); `documents` as
    `jackknife_t`'s."""
    low, high = jackknife_t(np.array(value), leave_one_out, documents=documents)
    return None, None, float(low), float(high)


def depth_trend(axis: DepthAxis) -> DepthTrend:
    """Per method: its multiplier at each common budget and depth, delta per budget with intervals, and the
    surface."""
    missing, sweeps = _at_depths(axis)
    if missing:
        return DepthTrend(missing, {})
    depths = np.array([s.depth for s in sweeps], dtype=float)
    labels = [label for label in sweeps[0].sample.labels if all(label in s.sample.labels for s in sweeps)]
    methods = [m for m in sweeps[0].sample.k if all(m in s.sample.k for s in sweeps)]
    resampled = all(s.sample.boot is not None for s in sweeps)
    groups = _grouped_loo(sweeps)
    out = {}
    for method in methods:
        budgets = []
        for label in labels:
            at = [s.sample.labels.index(label) for s in sweeps]
            k = np.array([s.sample.k[method][i] for s, i in zip(sweeps, at, strict=True)])
            if np.isnan(k).any():  # a budget that only the baseline trains in some sweep
                continue
            delta = log_log_fit(depths, k)[0]
            low = high = t_low = t_high = None
            if resampled:
                # (RESAMPLES, depths)
                boot = np.stack([s.sample.boot_of(method)[:, i] for s, i in zip(sweeps, at, strict=True)], axis=1)
                low, high = percentile_interval(np.array([log_log_fit(depths, b)[0] for b in boot]))
            if groups:
                # (seeds, depths); with the documents (DOCUMENT_GROUPS, depths)
                loo = np.stack([s.sample.loo_of(method)[:, i] for s, i in zip(sweeps, at, strict=True)], axis=1)
                by_documents = None
                if _documents_stored(sweeps):
                    left = np.stack([s.sample.documents_of(method)[:, i] for s, i in zip(sweeps, at, strict=True)],
                                    axis=1)
                    by_documents = np.array([log_log_fit(depths, b)[0] for b in left])
                _, _, t_low, t_high = _calibrated(delta, np.array([log_log_fit(depths, b)[0] for b in loo]),
                                                  by_documents)
            budgets.append(DepthBudget(label, float(sweeps[0].sample.x[at[0]]), k.tolist(),
                                       [point(s.sample, method, i, calibrated=False)
                                        for s, i in zip(sweeps, at, strict=True)],
                                       Slope(delta, low, high, t_low, t_high)))
        out[method] = DepthMethod(budgets, _surface(sweeps, method, resampled, groups),
                                  _interaction_surface(sweeps, method, groups))
    return DepthTrend({}, out, depths.astype(int).tolist(), labels, [len(s.sample.seeds) for s in sweeps],
                      bool(groups) and _documents_stored(sweeps))


def _surface(sweeps: list[AtDepth], method: str, resampled: bool, groups: int | None) -> DepthSurface:
    coefficients = log_surface_fit(_surface_points(sweeps, method))
    draws = low = high = t_low = t_high = None
    if resampled:
        resamples = len(sweeps[0].sample.boot_of(method))
        draws = np.array([log_surface_fit(_surface_points(sweeps, method, r)) for r in range(resamples)])
        low, high = percentile_interval(draws[:, 2])
    if groups:
        loo, by_documents = _left_out_fits(sweeps, groups,
                                           lambda **left: log_surface_fit(_surface_points(sweeps, method, **left))[2])
        _, _, t_low, t_high = _calibrated(coefficients[2], loo, by_documents)
    a, gamma, delta = (float(c) for c in coefficients)
    return DepthSurface((a, gamma, delta), draws,
                        Slope(float(coefficients[2]), low, high, t_low, t_high))


def _at_depths(axis: DepthAxis, x_scales: dict[str, float] | None = None) -> tuple[dict[str, str], list[AtDepth]]:
    """The axis's sweeps read once, shallowest first, with independent resamples (and each sweep's `x_scale` from
    `x_scales`, by config file); or, where some lack cells, what each of those lacks."""
    found = [(study, *one_model(study, CellStore.of(study))) for study in axis.sweeps]  # each in its results
    missing = {study.config_file: sweep.first_seed_gaps() for study, sweep, sample in found if sample is None}
    if missing:
        return missing, []
    scales = x_scales or {}
    return {}, independent_resamples(sorted((AtDepth(sweep.depth, sample, scales.get(study.config_file, 1.0))
                                             for study, sweep, sample in found if sample is not None),
                                            key=lambda s: s.depth))


def _surface_points(sweeps: list[AtDepth], method: str, resample: int | None = None, left_out: int | None = None,
                    epochs: float = REPEATS_FLAG, documents_left_out: int | None = None):
    """(x, depth, k) of every sweep's budgets read within `epochs` passes over its data: the estimates, or those of
    bootstrap resample `resample`, or those with seed `left_out` (its position) left out of every sweep, or those
    with group `documents_left_out` of the held-out documents left out of every sweep's cells."""
    def k(s: SeedBootstrap, i):
        if resample is not None:
            return s.boot_of(method)[resample, i]
        if documents_left_out is not None:
            return s.documents_of(method)[documents_left_out, i]
        return s.k[method][i] if left_out is None else s.loo_of(method)[left_out, i]

    return [(float(s.sample.x[i] * s.x_scale), s.depth, float(k(s.sample, i))) for s in sweeps
            for i in np.flatnonzero(within_repeats(s.sample.x, s.sample.epochs_per_x, epochs))]


@dataclass(frozen=True)
class CurveShape:
    """A shape of the depth surface: with or without the budget x depth term, fitted over the budgets read within
    `epochs` passes over the data."""

    name: str
    interaction: bool
    epochs: float


# The shapes a depth-informed prediction reads (configs/analysis/depth_axis.toml, the rule of 2026-12-05): the first
# is the primary surface, whose value is the prediction; the interval spans all three.
PREDICTION_SHAPES = (CurveShape("with the budget x depth term", True, REPEATS_FLAG),
                     CurveShape("without the budget x depth term", False, REPEATS_FLAG),
                     CurveShape("with the budget x depth term, budgets read within one epoch", True, 1.0))


@dataclass(frozen=True)
class ShapeFit:
    """One method's surface of one shape: its coefficients (a, gamma, delta[, eta]) and theirs with each seed
    position left out of every sweep (`left_out`, (groups, coefficients); None below MIN_SEEDS seeds)."""

    shape: CurveShape
    coefficients: tuple[float, ...]
    left_out: np.ndarray | None
    documents_left_out: np.ndarray | None = None  # (DOCUMENT_GROUPS, coefficients) where every cell stores them

    def at(self, x: float, depth: float) -> tuple[float, float | None, float | None]:
        """The multiplier at x (in the unit the surface was fitted in) and `depth` layers, with its calibrated 95%
        interval (the grouped jackknife t on the log scale); nan where this shape could not be fitted."""
        features = np.array([1.0, math.log(x), math.log(depth)]
                            + ([math.log(x) * math.log(depth)] if self.shape.interaction else []))
        log_k = float(np.dot(self.coefficients, features))
        if self.left_out is None:
            return math.exp(log_k), None, None
        low, high = jackknife_t(np.array(log_k), self.left_out @ features,
                                documents=_column(self.documents_left_out, features))
        return math.exp(log_k), math.exp(low), math.exp(high)


@dataclass(frozen=True)
class PredictionSurfaces:
    """Per method, its surface in every shape of PREDICTION_SHAPES, fitted with the budgets in one unit; the sweeps'
    depths and seed counts, the fitted budgets' range in that unit, and `missing` as `DepthTrend`'s."""

    missing: dict[str, str]
    methods: dict[str, list[ShapeFit]]
    depths: list[int] | None = None
    seeds: list[int] | None = None
    fitted_x: tuple[float, float] | None = None


def prediction_surfaces(axis: DepthAxis, x_scales: dict[str, float]) -> PredictionSurfaces:
    """Every method's surface in each of PREDICTION_SHAPES, each sweep's budgets multiplied by its `x_scales` entry
    (by config file) into the unit the prediction reads."""
    missing, sweeps = _at_depths(axis, x_scales)
    if missing:
        return PredictionSurfaces(missing, {})
    groups = _grouped_loo(sweeps)
    methods = [m for m in sweeps[0].sample.k if all(m in s.sample.k for s in sweeps)]
    out = {}
    for method in methods:
        fits = []
        for shape in PREDICTION_SHAPES:
            def fit(shape=shape, method=method, **left):
                return log_surface_fit(_surface_points(sweeps, method, epochs=shape.epochs, **left),
                                       interaction=shape.interaction)
            left_out, by_documents = _left_out_fits(sweeps, groups, fit) if groups else (None, None)
            fits.append(ShapeFit(shape, tuple(map(float, fit())), left_out, by_documents))
        out[method] = fits
    x = [x for x, _, _ in _surface_points(sweeps, methods[0])] if methods else [math.nan]
    return PredictionSurfaces({}, out, [s.depth for s in sweeps], [len(s.sample.seeds) for s in sweeps],
                              (min(x), max(x)))


def _grouped_loo(sweeps: list[AtDepth]) -> int | None:
    """The number of leave-one-out groups of the depth fits: group j leaves seed position j out of every sweep, whose
    seeds are independent runs (a grouped jackknife); None unless every sweep has the same MIN_SEEDS seeds or more."""
    counts = {len(s.sample.seeds) for s in sweeps}
    if len(counts) != 1 or any(s.sample.loo is None for s in sweeps):
        return None
    return counts.pop()


