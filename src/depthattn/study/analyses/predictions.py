"""Predictions committed before the runs they predict: each method's data multiplier at another study's budgets
(the GPU ladder's rungs, the paper's 1.5B shape), from a finished sweep's multiplier trend, and how they fared
once that study's cells exist.

A prediction reads the source sweep's trend k(x) = c x^gamma (depthattn.study.multiplier: least squares in log-log
over the budgets that pass over the data at most twice) at each target budget's tokens per parameter, with the
95% interval of the seed bootstrap's (c, gamma) pairs. That interval holds the seeds' uncertainty only, not the
step from the source's scale to the target's: the file says what the prediction assumes. A prediction file is
written once and never changed; a later one is a new file with its own date.

Scoring: at each target budget the measured multiplier (with its own interval where the target has the seeds for
one) **agrees** with the prediction when the two intervals overlap (the point where there is no interval), and is
**above** or **below** it otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...files import atomic_write_json, read_json_object
from ...train.config import MODEL_PRESETS
from ..fits import exp_linear
from ..multiplier import EXTRAPOLATION_LIMIT, BudgetTrend, MultiplierPoint, sweep_multipliers
from ..pricing import cell_flops
from ..spec import Study, setting_label
from ..stats import MIN_SEEDS
from ..store import CellStore
from ..sweep import MIN_BUDGETS, Sweep, model_depth
from .depth_axis import DepthAxis, ShapeFit, prediction_surfaces

FORMAT = "depthattn-multiplier-prediction"
PAPER_SHAPE = {"label": "paper 1.5B shape", "tokens_per_parameter": 20.0,
               "depth": MODEL_PRESETS["1.5b"]["num_hidden_layers"]}


def target_budgets(target: Study) -> list[dict]:
    """Each setting of `target` with the tokens per parameter its baseline trains there."""
    out = []
    for setting in target.settings():
        if not target.trains(setting, target.baseline):
            continue
        cost = cell_flops(target, setting, target.baseline)
        rest = {name: label for name, label in setting.items() if name != target.branched_axis.name}
        out.append({"group": setting_label(rest), "budget": setting[target.branched_axis.name],
                    "tokens_per_parameter": cost["tokens"] / cost["params"],
                    "tokens_per_non_embedding_parameter": cost["tokens"] / cost["params_non_embedding"],
                    "depth": model_depth(target, setting)})
    return out


def unscorable(target: Study) -> str:
    """Why no cells of `target` can ever score a prediction: fewer budgets than a multiplier needs; '' when they
    can."""
    axis = target.branched_axis
    budgets = [setting[axis.name] for setting in target.budget_settings(target.settings()[0], target.baseline)]
    if len(budgets) >= MIN_BUDGETS:
        return ""
    return (f"{target.config_file} has {len(budgets)} budgets on its axes.{axis.name} ({', '.join(budgets)}), and a "
            f"data multiplier reads {target.baseline}'s curve through {MIN_BUDGETS} budgets at least, so its cells "
            f"can never score a prediction: give axes.{axis.name} {MIN_BUDGETS} values or more")


def _at(trend: BudgetTrend, x: float) -> dict:
    draws = None if trend.draws is None else trend.draws[:, ::-1]  # (log c, gamma), the coefficients' order
    multiplier, low, high = exp_linear((trend.log_c, trend.gamma.value), (1.0, math.log(x)), draws)
    return {"multiplier": multiplier, "low": low, "high": high}


def predict(source: Study, store: CellStore, target: Study, date: str, assumes: str) -> dict:
    """The prediction of `source`'s finished sweep (its cells in `store`) for every budget of `target` (a branched study
    of the same methods) and for the paper's shape at 20 tokens per parameter."""
    if source.branch_axis is None or target.branch_axis is None:
        raise ValueError(f"a prediction goes from one budget sweep to another: {source.name} and {target.name} both "
                         "need a branched budget axis")
    if why := unscorable(target):
        raise ValueError(f"no prediction for {target.name}: {why}")
    models = Sweep.load(source, store).models()
    if len(models) != 1:
        raise ValueError(f"{source.name} has {len(models)} settings besides its budgets; predict from a sweep "
                         "of one model")
    found = sweep_multipliers(next(iter(models.values())))
    if found is None or any(row.trend.draws is None for row in found.rows):
        raise ValueError(f"{source.name} needs every method at five seeds or more at three budgets or more before it "
                         "can predict (`depthattn study` runs what is missing)")
    budgets = target_budgets(target)
    depth = model_depth(source, source.settings()[0])
    x_of = dict(zip(found.labels, found.x, strict=True))
    fitted = [x_of[label] for label in found.fit_budgets] or found.x
    reach = {"depths": [depth], "fit_tokens_per_parameter": [min(fitted), max(fitted)]}

    def at(trend, budget):
        return {**budget, **_at(trend, budget["tokens_per_parameter"]), "extrapolated": bool(far_past(reach, budget))}

    methods = {}
    for row in found.rows:
        if row.method not in target.methods:
            continue
        gamma = row.trend.gamma
        methods[row.method] = {
            "trend": {"gamma": gamma.value, "gamma_low": gamma.low, "gamma_high": gamma.high,
                      "c": math.exp(row.trend.log_c)},
            "at": [at(row.trend, budget) for budget in budgets], "paper": at(row.trend, PAPER_SHAPE)}
    return {"format": FORMAT, "date": date, "source": source.config_file, "target": target.config_file,
            "seeds": found.seeds, "fit_budgets": found.fit_budgets, **reach, "baseline": source.baseline,
            "assumes": assumes, "rule": __doc__.split("\n\n")[1].replace("\n", " "), "methods": methods}


def far_past(reach: dict, budget: dict) -> list[str]:
    """How far a prediction at `budget` (a target budget or the paper's shape) reads its source past what that
    measured, where it is more than EXTRAPOLATION_LIMIT times past: its depth against the sweeps' `depths`, its
    tokens per parameter against the fitted budgets' (`fit_tokens_per_parameter`, where `reach` has them)."""
    found = []
    low, high = min(reach["depths"]), max(reach["depths"])
    if max(budget["depth"] / high, low / budget["depth"]) > EXTRAPOLATION_LIMIT:
        measured = f"{low}" if low == high else f"{low}-{high}"
        found.append(f"{budget['depth']} layers against the {measured} measured")
    if fit := reach.get("fit_tokens_per_parameter"):
        x = budget["tokens_per_parameter"]
        if max(x / fit[1], fit[0] / x) > EXTRAPOLATION_LIMIT:
            found.append(f"{x:.3g} tokens per parameter against the {fit[0]:.3g}-{fit[1]:.3g} fitted")
    return found


def extrapolations(prediction: dict) -> list[str]:
    """Each target budget or shape that `prediction` reads its source more than EXTRAPOLATION_LIMIT times past what
    it measured, with how far: 'paper 1.5B shape: 48 layers against the 2 measured'."""
    if "depths" not in prediction:  # a file of an older release
        return []
    entry = next(iter(prediction["methods"].values()), None)
    if entry is None:
        return []
    lines = []
    for budget in [*entry["at"], entry["paper"]]:
        if far := far_past(prediction, budget):
            name = budget.get("label") or " ".join(filter(None, (budget["group"], f"budget {budget['budget']}")))
            lines.append(f"{name}: {'; '.join(far)}")
    return lines


def predict_with_depth(axis: DepthAxis, target: Study, date: str, assumes: str) -> dict:
    """The depth-informed prediction for every budget of `target` and the paper's shape, by the rule of
    configs/analysis/depth_axis.toml of 2026-12-05 (DEPTH_RULE): budgets in tokens per non-embedding parameter, the
    value of the surface with the budget x depth term, the interval spanning the calibrated intervals of every shape
    in PREDICTION_SHAPES; a budget read more than EXTRAPOLATION_LIMIT times past the sweeps' depths or fitted budgets
    is marked `extrapolated`."""
    if target.branch_axis is None:
        raise ValueError(f"{target.name} has no branched budget axis to predict")
    if why := unscorable(target):
        raise ValueError(f"no prediction for {target.name}: {why}")
    found = prediction_surfaces(axis, {sweep.config_file: _non_embedding_scale(sweep) for sweep in axis.sweeps})
    few = ", ".join(f"{n} at {depth} layers" for n, depth in zip(found.seeds or [], found.depths or [], strict=True)
                    if n < MIN_SEEDS)
    if found.missing or few:
        raise ValueError(f"{axis.config_file}: every sweep needs every method at {MIN_SEEDS} seeds or more at three "
                         f"budgets or more before it can predict (waiting for: "
                         f"{'; '.join(f'{s}: {g}' for s, g in found.missing.items()) or f'seeds: {few}'})")
    if any(fit.left_out is None for fits in found.methods.values() for fit in fits):
        raise ValueError(f"{axis.config_file}: a calibrated interval leaves one seed position out of every sweep at "
                         f"once, so every sweep needs the same seeds (they have {found.seeds})")
    reach = {"depths": found.depths, "fit_tokens_per_parameter": list(found.fitted_x or ())}

    def at(fits: list[ShapeFit], budget: dict) -> dict:
        read_off = (fit.at(budget["tokens_per_parameter"], budget["depth"]) for fit in fits)
        shapes = {fit.shape.name: [None if v is None or math.isnan(v) else v for v in read]
                  for fit, read in zip(fits, read_off, strict=True)}
        # a shape too few budgets fit (low and high: nan together)
        fitted = [(low, high) for _, low, high in shapes.values() if low is not None and high is not None]
        return {**budget, "multiplier": shapes[fits[0].shape.name][0],
                "low": min((low for low, _ in fitted), default=None),
                "high": max((high for _, high in fitted), default=None),
                "shapes": {name: dict(zip(("multiplier", "low", "high"), read, strict=True))
                           for name, read in shapes.items()},
                "extrapolated": bool(far_past(reach, budget))}

    methods = {}
    for method, fits in found.methods.items():
        if method not in target.methods:
            continue
        # eta only where the shape has the interaction term (three coefficients otherwise)
        trend = {fit.shape.name: dict(zip(("a", "gamma", "delta", "eta"), fit.coefficients, strict=False))
                 for fit in fits}
        shown: dict[str, object] = {**trend[fits[0].shape.name], "shapes": trend}
        methods[method] = {"trend": shown,
                           "at": [at(fits, _in_the_fields_unit(budget)) for budget in target_budgets(target)],
                           "paper": at(fits, PAPER_SHAPE)}
    return {"format": FORMAT, "date": date, "source": axis.config_file, "target": target.config_file,
            "unit": "tokens per non-embedding parameter", **reach, "seeds": found.seeds, "baseline": target.baseline,
            "assumes": assumes, "rule": DEPTH_RULE, "methods": methods}


def _in_the_fields_unit(budget: dict) -> dict:
    """A target budget read in tokens per non-embedding parameter, the count with embeddings beside it."""
    rest = {key: value for key, value in budget.items() if key != "tokens_per_non_embedding_parameter"}
    return {**rest, "tokens_per_parameter": budget["tokens_per_non_embedding_parameter"],
            "tokens_per_parameter_counting_embeddings": budget["tokens_per_parameter"]}


def _non_embedding_scale(sweep: Study) -> float:
    """Tokens per non-embedding parameter over tokens per parameter in `sweep`'s baseline model."""
    cost = cell_flops(sweep, sweep.settings()[0], sweep.baseline)
    return cost["params"] / cost["params_non_embedding"]


DEPTH_RULE = ("configs/analysis/depth_axis.toml's rule of 2026-12-05. Budgets in tokens per non-embedding parameter "
              "(x), in the sweeps and the target alike. The surface log k = a + gamma log x + delta log L + eta log x "
              "log L (L layers), fitted to the depth axis's sweeps over their budgets within two epochs, read at "
              "each target budget's x and depth, is the prediction; its 95% interval spans the calibrated intervals "
              "(grouped jackknife t, seeds) of three curve shapes: that surface, the surface without eta, and the "
              "surface with eta over the budgets within one epoch. The paper's shape is read at 20 tokens per "
              "non-embedding parameter. Neither holds the step to another width, tokenizer or corpus.")


def write_prediction(prediction: dict, folder: Path) -> Path:
    """Write `prediction` as <target>_from_<source>_<date>.json in `folder`; an existing file is never changed."""
    name = f"{Path(prediction['target']).stem}_from_{Path(prediction['source']).stem}_{prediction['date']}.json"
    path = Path(folder) / name
    if path.exists():
        raise FileExistsError(f"{path} exists: a prediction is written once; date a new one later with "
                              "--prediction-date YYYY-MM-DD, or write it into another --predictions folder")
    atomic_write_json(path, prediction)
    return path


SUPERSEDED = "superseded.json"  # beside the prediction files: {file name: why a later prediction replaces it}


def superseded(path: str | Path) -> str:
    """Why the prediction file at `path` is superseded, from SUPERSEDED in its folder; '' where it is not. A
    prediction file is never changed, so this is how one is marked."""
    index = Path(path).parent / SUPERSEDED
    return json.loads(index.read_text()).get(Path(path).name, "") if index.exists() else ""


def read_prediction(path: str | Path) -> dict:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no prediction file {path}; the dated ones are in docs/results/predictions/")
    data = read_json_object(path)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a prediction file (format {FORMAT!r}); `depthattn study SWEEP "
                         "--predict-for TARGET` writes one")
    return data


@dataclass(frozen=True)
class Score:
    """A predicted budget that the target's finished cells measure: the prediction file's entry (`predicted`), the
    measured multiplier and whether its calibrated interval agrees with the prediction or lies above or below it."""

    method: str
    group: str
    budget: str
    predicted: dict
    measured: MultiplierPoint
    verdict: str


def score(prediction: dict, target: Study, store: CellStore) -> list[Score]:
    """Each predicted budget of `target` that its finished cells (in `store`) measure, scored."""
    measured = {}
    for label, sweep in Sweep.load(target, store).models().items():
        found = sweep_multipliers(sweep)
        for row in found.rows if found else []:
            for measured_point in row.points:
                measured[row.method, label, measured_point.label] = measured_point
    rows = []
    for method, entry in prediction["methods"].items():
        for at in entry["at"]:
            point = measured.get((method, at["group"], at["budget"]))
            if point is None or not point.printable:
                continue
            # the calibrated interval, which holds its coverage (the percentile bootstrap's covers about 85% at
            # five seeds); below five seeds none: the point alone
            low, high = (point.t_low, point.t_high) if point.t_low is not None else (point.multiplier,) * 2
            agrees = "agrees" if low <= at["high"] and at["low"] <= high else (
                "above" if low > at["high"] else "below")
            rows.append(Score(method, at["group"], at["budget"], at, point, agrees))
    return rows


def why_unscored(prediction: dict, target: Study, store: CellStore) -> str:
    """Why no finished cell of `target` (in `store`) measures a budget that `prediction` predicts, in words, with what
    to do."""
    if why := unscorable(target):
        return why
    sweep = Sweep.load(target, store)
    if not sweep.results:
        return f"{target.config_file} has no finished cells yet (`depthattn study {target.config_file}` trains them)"
    found = sweep.models()
    axis = target.branched_axis
    reasons = []
    for group in dict.fromkeys(at["group"] for entry in prediction["methods"].values() for at in entry["at"]):
        named = f"{group}: " if group else ""
        cells = found[group].results if group in found else ()
        table = found[group].loss_table if cells else None
        labels, seeds = (table.labels, table.seeds) if table else ([], [])
        if len(labels) < MIN_BUDGETS or not seeds:
            seed = min((r.seed for r in cells), default=target.seeds[0])
            have = {(r.method, r.setting[axis.name]) for r in cells if r.seed == seed}
            lacking = [f"{cell.method} at {cell.setting[axis.name]}" for cell in target.cells([seed])
                       if _group(target, cell.setting) == group
                       and (cell.method, cell.setting[axis.name]) not in have]
            reasons.append(f"{named}a multiplier needs {target.baseline}'s cells at {MIN_BUDGETS} budgets at least, "
                           f"with a seed that every method has at each; it has {len(labels)} such budgets (seed "
                           f"{seed} lacks {', '.join(lacking) or 'no cell'}; `depthattn study {target.config_file}` "
                           "trains them)")
        else:
            reasons.append(f"{named}its multipliers at the predicted budgets are still to come, or read "
                           f"{target.baseline}'s curve too far past its measured budgets to be numbers")
    return "; ".join(reasons)


def _group(study: Study, setting: Mapping[str, str]) -> str:
    """The label of `setting` without its budget: the model `Sweep.models` files its cells under."""
    return setting_label({name: label for name, label in setting.items() if name != study.branched_axis.name})


