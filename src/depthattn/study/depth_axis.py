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
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..train.config import MODEL_PRESETS, config_path, read_toml
from .calibrated import jackknife_t, verdict
from .multiplier import (
    EXTRAPOLATION_LIMIT,
    REPEATS_FLAG,
    RESAMPLES,
    first_seed_gaps,
    format_multiplier,
    groups,
    log_log_fit,
    multiplier_point,
    percentile_interval,
    seed_bootstrap,
)
from .records import Cell
from .spec import Study
from .stats import MIN_SEEDS


@dataclass
class DepthAxis:
    """Budget sweeps of the same methods and budgets at different depths."""

    title: str
    sweeps: list[Study]
    config_file: str

    @classmethod
    def load(cls, path: str | Path) -> DepthAxis:
        title, sweeps, path = read_sweeps(path, "depth_axis", "two or more study configs (paths relative to it) "
                                          "that differ only in depth", lambda n: n >= 2)
        depths = [sweep_depth(s) for s in sweeps]
        if len(set(depths)) != len(depths):
            raise ValueError(f"{path}: two sweeps have the same depth ({depths}); each sweep is one depth")
        return cls(title, sweeps, str(path))


def read_sweeps(path: str | Path, table: str, wanted: str, count_ok) -> tuple[str, list[Study], Path]:
    """An analysis config's [table]: its title and its budget sweeps (`sweeps`, paths relative to the file)."""
    path = config_path(path)
    head = read_toml(path, "analysis config", "configs/analysis/").get(table)
    if not isinstance(head, dict) or not isinstance(head.get("sweeps"), list) or not count_ok(len(head["sweeps"])):
        raise ValueError(f"{path}: this analysis has a [{table}] table with `sweeps`, {wanted}")
    unknown = set(head) - {"title", "sweeps"}
    if unknown:
        raise ValueError(f"{path}: unknown [{table}] keys {sorted(unknown)}; it takes title and sweeps")
    sweeps = [Study.load(os.path.normpath(path.parent / name)) for name in head["sweeps"]]
    for sweep in sweeps:
        if sweep.branch_axis is None:
            raise ValueError(f"{path}: {sweep.config_file} has no branched budget axis; the analysis compares "
                             "budget sweeps")
    return head.get("title", path.stem), sweeps, path


def sweep_depth(study: Study) -> int:
    """The unrolled depth (layers x loops) of a sweep's baseline model."""
    return model_depth(study, study.settings()[0])


def model_depth(study: Study, setting: dict) -> int:
    model = study.cell_config(Cell(setting, study.baseline, study.seeds[0])).model
    return {**MODEL_PRESETS[model.preset], **model.overrides}["num_hidden_layers"] * model.num_loops


@dataclass
class SweepMultipliers:
    """One sweep's multipliers: per method, at each budget label, the point estimate and its resamples."""

    depth: int
    labels: list[str]
    x: np.ndarray  # tokens per parameter of each budget
    in_fit: np.ndarray  # the budgets that pass over the data at most REPEATS_FLAG times
    seeds: list[int]
    k: dict[str, np.ndarray]  # method -> (budgets,)
    draws: dict[str, np.ndarray] | None  # method -> (RESAMPLES, budgets); None below MIN_SEEDS seeds
    read: dict[str, np.ndarray]  # method -> (budgets,): the tokens per parameter where the baseline's curve was read
    epochs_per_x: float | None  # passes over the data per token per parameter
    loo: dict[str, np.ndarray] | None = None  # method -> (seeds, budgets), each seed left out once (MIN_SEEDS on)

    def point(self, method: str, i: int) -> dict:
        """The method's multiplier at budget i as each sweep's own report states it (`multiplier_point`)."""
        return multiplier_point(self.labels, self.x, i, self.k[method], self.read[method], self.epochs_per_x,
                                self.draws[method] if self.draws is not None else None)


def sweep_multipliers(study: Study, seed: int = 0) -> SweepMultipliers | None:
    """`study`'s multipliers with the resamples `depthattn.study.multiplier.multipliers` draws; None without three
    budgets and one seed that every method has at each."""
    found = groups(study, study.read_results())
    if len(found) != 1:
        return None
    sample = seed_bootstrap(study, next(iter(found.values())), seed)
    if sample is None:
        return None
    return SweepMultipliers(sweep_depth(study), sample.labels, sample.x, sample.in_fit, sample.seeds, sample.k,
                            sample.boot, sample.read, sample.epochs_per_x, sample.loo)


def independent_resamples(sweeps: list[SweepMultipliers]) -> list[SweepMultipliers]:
    """The sweeps with each one's resamples in an order of its own (a fixed permutation per sweep after the first).
    Every sweep draws its seeds from the same generator, so resample r would otherwise pick the same seed positions
    in every sweep; reordered, resample r of the depth fits combines independent draws, and each sweep keeps the
    resamples (and intervals) of its own report."""
    out = sweeps[:1]
    for j, sweep in enumerate(sweeps[1:], start=1):
        draws = sweep.draws
        if draws is not None:
            order = np.random.default_rng(j).permutation(len(next(iter(draws.values()))))
            draws = {method: d[order] for method, d in draws.items()}
        out.append(replace(sweep, draws=draws))
    return out


def _surface(points: list[tuple[float, float, float]], interaction: bool = False) -> np.ndarray:
    """(a, gamma, delta) of log k = a + gamma log x + delta log L over points (x, L, k), and with `interaction` eta
    of the added term eta log x log L; nan without enough finite points spanning two depths and two budgets."""
    rows = [(x, depth, k) for x, depth, k in points if math.isfinite(k) and k > 0]
    size = 4 if interaction else 3
    if len(rows) < size + 1 or len({r[1] for r in rows}) < 2 or len({r[0] for r in rows}) < 2:
        return np.full(size, math.nan)
    x, depth, k = map(np.array, zip(*rows))
    columns = [np.ones(len(x)), np.log(x), np.log(depth)] + ([np.log(x) * np.log(depth)] if interaction else [])
    return np.linalg.lstsq(np.column_stack(columns), np.log(k), rcond=None)[0]


INTERACTION_AT = (1.0, 10.0, 20.0)  # tokens per parameter where the interaction surface's slope in depth is stated


def _interaction_surface(sweeps: list[SweepMultipliers], method: str, groups: int | None) -> dict:
    """The surface with a budget x depth term (configs/analysis/depth_axis.toml's primary surface since
    2026-12-05): its coefficients, eta's calibrated interval, and the slope in depth delta + eta log x at each of
    INTERACTION_AT with its calibrated interval."""
    coefficients = _surface(_surface_points(sweeps, method), interaction=True)
    out = {"coefficients": coefficients.tolist(), "eta_low": None, "eta_high": None, "eta_verdict": None,
           "delta_at": {x: {"delta": float(coefficients[2] + coefficients[3] * math.log(x)), "low": None,
                            "high": None, "verdict": None} for x in INTERACTION_AT}}
    if groups:
        loo = np.array([_surface(_surface_points(sweeps, method, left_out=j), interaction=True)
                        for j in range(groups)])
        low, high = jackknife_t(np.array(coefficients[3]), loo[:, 3])
        out.update(eta_low=float(low), eta_high=float(high), eta_verdict=verdict(low, high))
        for x, row in out["delta_at"].items():
            low, high = jackknife_t(np.array(row["delta"]), loo[:, 2] + loo[:, 3] * math.log(x))
            row.update(low=float(low), high=float(high), verdict=verdict(low, high))
    return out


def depth_trend(axis: DepthAxis) -> dict:
    """Per method: its multiplier at each common budget and depth, delta per budget with intervals, and the
    surface; `missing`: the sweeps without enough cells yet, each with what its first seed lacks (then nothing is
    fitted)."""
    found = [(sweep, sweep_multipliers(sweep)) for sweep in axis.sweeps]
    missing = {sweep.config_file: first_seed_gaps(sweep, sweep.read_results()) for sweep, m in found if m is None}
    if missing:
        return {"missing": missing, "methods": {}}
    sweeps = independent_resamples(sorted((m for _, m in found), key=lambda m: m.depth))
    depths = np.array([s.depth for s in sweeps], dtype=float)
    labels = [label for label in sweeps[0].labels if all(label in s.labels for s in sweeps)]
    methods = [m for m in sweeps[0].k if all(m in s.k for s in sweeps)]
    resampled = all(s.draws is not None for s in sweeps)
    groups = _grouped_loo(sweeps)
    out = {"missing": {}, "depths": depths.astype(int).tolist(), "labels": labels,
           "seeds": [len(s.seeds) for s in sweeps], "methods": {}}
    for method in methods:
        budgets = []
        for label in labels:
            at = [s.labels.index(label) for s in sweeps]
            k = np.array([s.k[method][i] for s, i in zip(sweeps, at)])
            if np.isnan(k).any():  # a budget that only the baseline trains in some sweep
                continue
            row = {"label": label, "x": float(sweeps[0].x[at[0]]), "k": k.tolist(), "delta": log_log_fit(depths, k)[0],
                   "points": [s.point(method, i) for s, i in zip(sweeps, at)], "low": None, "high": None,
                   "verdict": None}
            row.update(t_low=None, t_high=None, t_verdict=None)
            if resampled:
                boot = np.stack([s.draws[method][:, i] for s, i in zip(sweeps, at)], axis=1)  # (RESAMPLES, depths)
                row["low"], row["high"] = percentile_interval(np.array([log_log_fit(depths, b)[0] for b in boot]))
                row["verdict"] = verdict(row["low"], row["high"])
            if groups:
                loo = np.stack([s.loo[method][:, i] for s, i in zip(sweeps, at)], axis=1)  # (seeds, depths)
                low, high = jackknife_t(np.array(row["delta"]), np.array([log_log_fit(depths, b)[0] for b in loo]))
                row["t_low"], row["t_high"], row["t_verdict"] = float(low), float(high), verdict(low, high)
            budgets.append(row)
        surface = {"coefficients": _surface(_surface_points(sweeps, method)).tolist(), "draws": None,
                   "low": None, "high": None, "verdict": None, "t_low": None, "t_high": None, "t_verdict": None}
        if resampled:
            draws = np.array([_surface(_surface_points(sweeps, method, r)) for r in range(RESAMPLES)])
            surface["draws"] = draws
            surface["low"], surface["high"] = percentile_interval(draws[:, 2])
            surface["verdict"] = verdict(surface["low"], surface["high"])
        if groups:
            loo = np.array([_surface(_surface_points(sweeps, method, left_out=j))[2] for j in range(groups)])
            low, high = jackknife_t(np.array(surface["coefficients"][2]), loo)
            surface["t_low"], surface["t_high"], surface["t_verdict"] = float(low), float(high), verdict(low, high)
        out["methods"][method] = {"budgets": budgets, "surface": surface,
                                  "interaction": _interaction_surface(sweeps, method, groups)}
    return out


def _surface_points(sweeps: list[SweepMultipliers], method: str, resample: int | None = None,
                    left_out: int | None = None):
    """(x, depth, k) of every sweep's budgets read within REPEATS_FLAG epochs: the estimates, or those of bootstrap
    resample `resample`, or those with seed `left_out` (its position) left out of every sweep."""
    def k(s, i):
        if resample is not None:
            return s.draws[method][resample, i]
        return s.k[method][i] if left_out is None else s.loo[method][left_out, i]

    return [(float(s.x[i]), s.depth, float(k(s, i))) for s in sweeps for i in np.flatnonzero(s.in_fit)]


def _grouped_loo(sweeps: list[SweepMultipliers]) -> int | None:
    """The number of leave-one-out groups of the depth fits: group j leaves seed position j out of every sweep, whose
    seeds are independent runs (a grouped jackknife); None unless every sweep has the same MIN_SEEDS seeds or more."""
    counts = {len(s.seeds) for s in sweeps}
    if len(counts) != 1 or any(s.loo is None for s in sweeps):
        return None
    return counts.pop()


def surface_at(surface: dict, x: float, depth: float) -> dict:
    """The surface's multiplier at x tokens per parameter and `depth` layers, with the resamples' 95% interval."""
    a, gamma, delta = surface["coefficients"]
    point = {"multiplier": math.exp(a + gamma * math.log(x) + delta * math.log(depth)), "low": None, "high": None}
    if surface["draws"] is not None:
        d = surface["draws"]
        point["low"], point["high"] = percentile_interval(np.exp(d[:, 0] + d[:, 1] * math.log(x)
                                                                 + d[:, 2] * math.log(depth)))
    return point


def _interval(low, high) -> str:
    return f" [{low:+.3f}, {high:+.3f}]" if low is not None else ""


def _interaction_lines(found: dict) -> list[str]:
    """The surface with a budget x depth term, as the analysis config's rule states it."""
    a, gamma, delta, eta = found["coefficients"]
    if math.isnan(eta):
        return []
    at = "; ".join(f"{x:g}: {row['delta']:+.3f}{_interval(row['low'], row['high'])}"
                   + (f" **{row['verdict']}**" if row["verdict"] else "") for x, row in found["delta_at"].items())
    eta_text = f"eta {eta:+.3f}{_interval(found['eta_low'], found['eta_high'])}"
    if found["eta_verdict"]:
        eta_text += f" (calibrated): the gain from depth **{found['eta_verdict']}** with the budget"
    return [f"With a budget x depth term (the primary surface since 2026-12-05): log k = {a:+.3f} {gamma:+.3f} "
            f"log x {delta:+.3f} log L {eta:+.3f} log x log L; {eta_text}. Slope in depth, delta + eta log x "
            f"[calibrated], at tokens per parameter {at}.", ""]


def format_depth_axis(axis: DepthAxis, trend: dict) -> str:
    """The depth axis as Markdown: per method, the multiplier at each depth and budget, delta with its interval and
    verdict, then the surface."""
    lines = [f"# {axis.title}", "", f"Config: `{axis.config_file}`; sweeps: "
             + ", ".join(f"`{s.config_file}`" for s in axis.sweeps) + ".", ""]
    if trend["missing"]:
        lines += ["Waiting for cells (three budgets and one seed that every method has at each, at least; "
                  "`depthattn study` on a sweep runs what it lacks):", ""]
        lines += [f"- `{sweep}`: {gaps}" for sweep, gaps in trend["missing"].items()]
        return "\n".join(lines) + "\n"
    depths = trend["depths"]
    seeds = ", ".join(f"{n} at {d} layers" for n, d in zip(trend["seeds"], depths))
    baseline = axis.sweeps[0].baseline
    lines += [f"Data multiplier over {baseline} at each depth (seeds: {seeds}), as each sweep's own report states "
              f"it: † read on {baseline}'s fitted curve beyond that sweep's measured budgets (more than "
              f"{EXTRAPOLATION_LIMIT:g}x beyond: a bound instead), ‡ read on it past {REPEATS_FLAG:g} epochs; "
              "delta: the slope of log multiplier against log depth, with its 95% seed-bootstrap interval (none below "
              f"{MIN_SEEDS} seeds in every sweep).", ""]
    for method, entry in trend["methods"].items():
        calibrated = entry["surface"].get("t_low") is not None
        lines += [f"## {method}", "", "| tokens per parameter | " + " | ".join(f"{d} layers" for d in depths)
                  + " | delta [95%] | with depth |" + (" delta [calibrated 95%] | with depth |" if calibrated else ""),
                  "|---" * (len(depths) + 3 + 2 * calibrated) + "|"]
        for row in entry["budgets"]:
            cells = [format_multiplier(point) for point in row["points"]]
            lines.append(f"| {row['label']} | " + " | ".join(cells) + f" | {row['delta']:+.3f}"
                         f"{_interval(row['low'], row['high'])} | {row['verdict'] or '—'} |"
                         + (f" {row['delta']:+.3f}{_interval(row['t_low'], row['t_high'])} | {row['t_verdict']} |"
                            if calibrated else ""))
        a, gamma, delta = entry["surface"]["coefficients"]
        s = entry["surface"]
        lines += ["", f"Surface over the budgets read within {REPEATS_FLAG:g} epochs: log k = {a:+.3f} "
                  f"{gamma:+.3f} log x {delta:+.3f} log L; delta{_interval(s['low'], s['high'])}: "
                  f"**{s['verdict'] or 'no verdict (too few seeds)'}** with depth"
                  + (f"; calibrated{_interval(s['t_low'], s['t_high'])}: **{s['t_verdict']}**" if calibrated else "")
                  + ".", ""]
        lines += _interaction_lines(entry["interaction"])
    if any(entry["surface"].get("t_low") is not None for entry in trend["methods"].values()):
        lines += ["Calibrated: the jackknife t-interval (study/calibrated.py), each leave-one-out fit leaving one seed "
                  "position out of every sweep at once (a seed's runs at each depth share its data order); the "
                  "bootstrap percentiles beside it under-cover at five seeds. Read these where the two disagree.", ""]
    lines.append(f"A prediction read more than {EXTRAPOLATION_LIMIT:g}x past the measured depths ({depths[0]} to "
                 f"{depths[-1]} layers) is marked as an extrapolation.")
    return "\n".join(lines) + "\n"
