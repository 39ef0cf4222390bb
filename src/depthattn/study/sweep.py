"""A budget sweep with its results, read once: a study and its finished cells of one model, with what every
analysis of it starts from (the budgets' tokens per parameter, the seeds every method has, the loss table, the
baseline's curve, the data multipliers and their seed resamples), each computed at its first use. The rules it
reads them by are depthattn.study.multiplier's; an analysis config (configs/analysis/*.toml) names its sweeps."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..train.config import MODEL_PRESETS, config_path, read_toml
from .curve import BaselineCurve
from .records import Cell, CellResult
from .spec import REPEATS_FLAG, Study, setting_label
from .stats import MIN_SEEDS
from .store import CellStore

RESAMPLES = 2000
MIN_BUDGETS = 3  # a multiplier reads the baseline's curve through this many measured budgets at least
DOCUMENT_GROUPS = 10  # the held-out documents' groups (every 10th document from the g-th) of the jackknife


@dataclass(frozen=True)
class LossTable:
    """Budget labels (ascending), their tokens per parameter, the table's seeds, and per method its losses
    (budgets, seeds), nan where the method has none."""

    labels: list[str]
    x: np.ndarray
    seeds: list[int]
    losses: dict[str, np.ndarray]


@dataclass(frozen=True)
class SeedBootstrap:
    """A sweep's loss table, the baseline's curve and every other method's data multipliers (and where they read
    that curve), with the same from RESAMPLES resamples of the seeds where there are MIN_SEEDS of them."""

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
    rng_state: Mapping[str, Any]  # the generator's state after the resamples, for the draws that follow (joint fit's)
    documents: dict[str, np.ndarray] | None = None  # method -> (DOCUMENT_GROUPS, budgets), each group of held-out
    # documents left out once; None unless every cell stores its documents' losses
    document_tables: list[dict[str, np.ndarray]] | None = None  # the loss table with each group left out, as `table`

    def boot_of(self, method: str) -> np.ndarray:
        """`boot[method]`, for the readings made only where the seeds carry resamples."""
        if self.boot is None:
            raise ValueError(f"{len(self.seeds)} seeds carry no resamples; they need {MIN_SEEDS} seeds at least")
        return self.boot[method]

    def loo_of(self, method: str) -> np.ndarray:
        """`loo[method]`, for the readings made only where the seeds carry resamples."""
        if self.loo is None:
            raise ValueError(f"{len(self.seeds)} seeds carry no resamples; they need {MIN_SEEDS} seeds at least")
        return self.loo[method]

    def documents_of(self, method: str) -> np.ndarray:
        """`documents[method]`, for the readings made only where every cell stores its documents' losses."""
        if self.documents is None:
            raise ValueError("these cells do not store each held-out document's loss (cells run before "
                             "val_documents was recorded)")
        return self.documents[method]

    @property
    def in_fit(self) -> np.ndarray:
        """The budgets that pass over the data at most REPEATS_FLAG times (the ones the fits use)."""
        return within_repeats(self.x, self.epochs_per_x)

    def generator(self) -> np.random.Generator:
        """A generator where the resamples left theirs: the same draws however often it is asked for."""
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = self.rng_state
        return rng


@dataclass(frozen=True)
class Sweep:
    """A study's finished cells (of one model, where `models` split them), read once; what the analyses read of
    them is computed at its first use."""

    study: Study
    results: tuple[CellResult, ...]
    seed: int = 0  # of the seed bootstrap's generator

    @classmethod
    def load(cls, study: Study, store: CellStore) -> Sweep:
        """`study`'s finished cells in `store`."""
        return cls(study, tuple(store.read_results(study)))

    def models(self) -> dict[str, Sweep]:
        """A branched study's sweeps per setting of its other axes (a ladder's sizes), by that setting's label."""
        axis = self.study.branched_axis
        found: dict[str, list[CellResult]] = {}
        for result in self.results:
            rest = {name: label for name, label in result.setting.items() if name != axis.name}
            found.setdefault(setting_label(rest), []).append(result)
        return {label: Sweep(self.study, tuple(results), self.seed) for label, results in found.items()}

    @property
    def depth(self) -> int:
        return sweep_depth(self.study)

    @functools.cached_property
    def tokens_per_parameter(self) -> dict[str, float]:
        """Per budget label of the branched (or first) axis: training tokens per parameter of the baseline model."""
        study = self.study
        axis = study.branch_axis or study.axes[0]
        out = {}
        for label in axis.values:
            base = [r for r in self.results if r.setting[axis.name] == label and r.method == study.baseline
                    and math.isfinite(r.val_loss)]  # a diverged run (a tuning's) trained no tokens to count
            if base:
                out[label] = base[0].train_tokens / base[0].params_total
        return out

    @functools.cached_property
    def epochs_per_x(self) -> float | None:
        """Passes over the training data per token per parameter of the baseline model (from the cells'
        data_epochs)."""
        axis = self.study.branched_axis
        for r in self.results:
            if r.method == self.study.baseline and r.data_epochs is not None:
                return r.data_epochs / self.tokens_per_parameter[r.setting[axis.name]]
        return None

    @functools.cached_property
    def loss_table(self) -> LossTable:
        """The losses a multiplier reads. The seeds are those with every method's cell at every budget they all
        train within REPEATS_FLAG epochs (the budgets the verdict reads). A method's losses at any other budget
        enter once every one of those seeds has its cell there; until then that budget is the baseline's alone
        (its curve), or left out while the baseline too lacks a seed's cell, so that cells still to come never
        cost the table a seed."""
        study, x_of = self.study, self.tokens_per_parameter
        axis = study.branched_axis
        loss = {(r.method, r.setting[axis.name], r.seed): r.val_loss for r in self.results}
        methods = [m for m in study.methods if any(key[0] == m for key in loss)]

        def trains_all(label: str) -> bool:
            return all(study.trains({axis.name: label}, m) for m in methods)

        shared = [label for label in x_of if trains_all(label)]
        read = [label for label in shared if within_repeats(x_of[label], self.epochs_per_x)]
        seeds = [s for s in sorted({key[2] for key in loss})
                 if all((m, label, s) in loss for label in read or shared for m in methods)]

        def complete(method: str, label: str) -> bool:
            return all((method, label, s) in loss for s in seeds)

        labels = sorted((label for label in x_of if complete(study.baseline, label)), key=x_of.__getitem__)
        table = {m: np.array([[loss[m, label, s] if complete(m, label) else math.nan for s in seeds]
                              for label in labels]).reshape(len(labels), len(seeds))
                 for m in methods}
        return LossTable(labels, np.array([x_of[label] for label in labels]), seeds, table)

    @functools.cached_property
    def bootstrap(self) -> SeedBootstrap | None:
        """None without a branched axis, three budgets and one seed that every method has at every budget."""
        study = self.study
        if study.branch_axis is None:
            return None
        found = self.loss_table
        labels, x, seeds, table = found.labels, found.x, found.seeds, found.losses
        if len(labels) < MIN_BUDGETS or not seeds or study.baseline not in table:
            return None
        base = table[study.baseline]
        rng = np.random.default_rng(self.seed)
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
        without = self.documents_left_out() if draws is not None else None
        if without is not None:
            every_seed = np.arange(len(seeds))[None, :]
            rows = [resampled_multipliers(x, t[study.baseline], {m: t[m] for m in methods}, every_seed)
                    for t in without]
            documents = {m: np.concatenate([row[m] for row in rows]) for m in methods}
        return SeedBootstrap(labels, x, seeds, table, self.epochs_per_x, curve, k, read, boot, loo,
                             rng.bit_generator.state, documents, without)

    @functools.cached_property
    def documents_note(self) -> str:
        """Why intervals over these cells cannot hold the held-out documents' variance ('' where they can): the
        reason `documents_left_out` is None, in words a page prints."""
        found = [r.record.get("val_documents") for r in self.results if math.isfinite(r.val_loss)]
        stored = [documents for documents in found if documents is not None]
        if not stored or len(stored) < len(found):
            return "not every cell stores each held-out document's loss: older cells predate it"
        fewest = min(len(documents["nats"]) for documents in stored)
        if fewest < DOCUMENT_GROUPS:
            return (f"the held-out split has {fewest} documents, fewer than the {DOCUMENT_GROUPS} groups its jackknife "
                    "leaves out in turn")
        return ""

    def documents_left_out(self) -> list[dict[str, np.ndarray]] | None:
        """`loss_table`'s losses once per group of held-out documents, that group left out of every cell's loss
        (its nats and tokens taken out of the whole split's); None unless every cell of the table stores its
        documents' losses (`val_documents`) and the split has a document for every group (a group left empty, or
        one holding the whole split, says nothing of the documents' variance)."""
        axis, found = self.study.branched_axis, self.loss_table
        table = found.losses
        cells = {(r.method, r.setting[axis.name], r.seed): r for r in self.results}
        kept = {}
        for method, losses in table.items():
            for (i, j), value in np.ndenumerate(losses):
                if not math.isfinite(value):  # no cell, or a diverged run: the same with any documents left out
                    continue
                documents = cells[method, found.labels[i], found.seeds[j]].record.get("val_documents")
                if documents is None or len(documents["nats"]) < DOCUMENT_GROUPS:
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

    def first_seed_gaps(self) -> str:
        """What the study's first seed with cells still lacks for a multiplier, per method, e.g. "seed 0 lacks moda
        at 5, 10, 20; vanilla at 30" (`depthattn study` on the study runs them)."""
        study, results = self.study, self.results
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
        return f"seed {seed} lacks " + "; ".join(f"{m} at {', '.join(lacking[m])}" for m in study.methods
                                                 if m in lacking)


def one_model(study: Study, store: CellStore) -> tuple[Sweep, SeedBootstrap | None]:
    """A sweep of one model read once, with its seed bootstrap (None where it has cells of several models, or too
    few for a multiplier)."""
    sweep = Sweep.load(study, store)
    models = sweep.models()
    return sweep, next(iter(models.values())).bootstrap if len(models) == 1 else None


def within_repeats(x: float | np.ndarray, epochs_per_x: float | None, epochs: float = REPEATS_FLAG) -> np.ndarray:
    """Whether budgets `x` (tokens per parameter) pass over the data at most `epochs` times; all do when the cells
    do not say how many epochs they trained."""
    return np.asarray(x) * (epochs_per_x or 0) <= epochs


def data_multipliers(x: np.ndarray, curve: BaselineCurve, method: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per budget: the data multiplier of mean losses `method` (budgets, seeds) over the baseline's `curve`, and the
    tokens per parameter where that curve was read."""
    read = np.array([curve.tokens_for(loss) for loss in method.mean(axis=1)])
    return read / x, read


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
    return {m: np.array([data_multipliers(x, c, t[:, d])[0] for c, d in zip(curves, draws, strict=True)])
            for m, t in tables.items()}


def sweep_depth(study: Study) -> int:
    """The unrolled depth (layers x loops) of a sweep's baseline model."""
    return model_depth(study, study.settings()[0])


def model_depth(study: Study, setting: dict) -> int:
    """The unrolled depth (layers x loops) of the baseline model in `setting`."""
    model = study.cell_config(Cell(setting, study.baseline, study.seeds[0])).model
    return {**MODEL_PRESETS[model.preset], **model.overrides}["num_hidden_layers"] * model.num_loops


def load_named(config: Path, name: str, results: str | None) -> Study:
    """The study an analysis config names (relative to it), an error naming that config where it fails."""
    try:
        return Study.load(os.path.normpath(config.parent / name), results=results)
    except (OSError, ValueError) as error:
        raise ValueError(f"{config} names {name}: {error}") from None


def read_sweeps(path: str | Path, table: str, wanted: str, count_ok,
                results: str | None = None) -> tuple[str, list[Study], Path]:
    """An analysis config's [table]: its title and its budget sweeps (`sweeps`, paths relative to the file), their
    cells read in `results` where given (else each sweep's own)."""
    path = config_path(path)
    head = read_toml(path, "analysis config", "configs/analysis/").get(table)
    unknown = set(head) - {"title", "sweeps"} if isinstance(head, dict) else set()
    if unknown:
        raise ValueError(f"{path}: unknown [{table}] keys {sorted(unknown)}; it takes title and sweeps")
    if not isinstance(head, dict) or not isinstance(head.get("sweeps"), list) or not count_ok(len(head["sweeps"])):
        raise ValueError(f"{path}: this analysis has a [{table}] table with `sweeps`, {wanted}")
    if len(set(head["sweeps"])) != len(head["sweeps"]) or not isinstance(head.get("title", ""), str):
        raise ValueError(f"{path}: [{table}] names each sweep once, and its title is a string")
    sweeps = [load_named(path, name, results) for name in head["sweeps"]]
    for sweep in sweeps:
        if sweep.branch_axis is None or len(sweep.axes) > 1:
            raise ValueError(f"{path}: {sweep.config_file} is no budget sweep of one model (a branched budget axis "
                             "and no other); the analysis compares such sweeps")
    return head.get("title", path.stem), sweeps, path
