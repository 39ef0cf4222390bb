"""`depthattn study`: sweeps of methods x seeds over model, data and budget axes, with paired statistics.

A study config (configs/study/*.toml) holds:

    [study]                       title, methods, seeds, baseline; optionally more_seeds (run where a
                                  difference's 95% interval still spans zero), contrasts (extra method
                                  pairs, e.g. [["depth_attention", "value_residual"]]), paper (a table
                                  of the paper's numbers per method, shown beside ours) and describe
                                  (method = what it changes, a column of the report)
    [axes.NAME]                   key = a training-config key ("model.overrides.num_hidden_layers", "data.path",
                                  "train.steps", ...); values = a list, or a table {label = value}; without
                                  key, values = {label = {key = value, ...}}: each label sets several keys
                                  (settings that each change something else from the base)
    [study.search]                a pre-registered search among the study's methods: candidates, metric,
                                  seeds and pick (how many go on); the rule is fixed here: the `pick` candidates
                                  with the lowest mean metric over those seeds, once all their cells are in
    [study.confirm]               from = another study config with a [study.search]; its picks join this study's
                                  methods once the search is complete, each contrasted with `against`
    [datasets.NAME]               a dataset the study prepares from the embedded corpus when its folder is
                                  missing: path, vocab_size (258 = plain bytes: no merges)
    [base.SECTION]                the training config every cell starts from
    extends = "core.toml"         (in [study]) take another study's [base] and [datasets], then apply this file's

A setting is one combination of axis values; a cell is (setting, method, seed). Cells with the same setting
and seed share the data order and the backbone's initial weights, so differences are paired by seed.

A cell is stored under a key made from its training config (a hash of everything but the method and seed):
checkpoints in `runs/study/<key>/<method>/seed_<s>/`, the small result file in
`docs/results/study/cells/<key>/<method>/seed_<s>.json` (commit these). So studies that share a cell train it
once, a changed config gets a new key instead of a stale result, a cell whose result file exists is never
rerun, and an interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data import MANIFEST_NAME, prepare
from ..data.manifest import TOKENIZER_DIR
from ..data.shards import TokenShards
from ..data.tokenizer import load_tokenizer
from ..files import atomic_write_bytes, atomic_write_json
from ..methods import count_parameters
from ..presets import PRESETS
from ..train import TrainConfig, train
from ..train.config import read_toml
from .loading import load_model, run_metadata
from .perplexity import compute_perplexity
from .plots import read_metrics

CONFIDENCE = 0.95


@dataclass
class Axis:
    name: str
    key: str | None  # "section.key" or "model.overrides.field"; None: each value is a table {key: value}
    values: dict  # label -> value

    def apply(self, data: dict, label: str) -> None:
        """Set this axis's key(s) to the values of `label` in a training config."""
        for key, value in ({self.key: self.values[label]} if self.key else self.values[label]).items():
            set_key(data, key, value)


@dataclass
class Search:
    """A pre-registered search: among `candidates`, the `pick` with the lowest mean `metric` over `seeds` go on.
    Written in the study config before its cells run; the pick is made only once every candidate has every seed."""

    candidates: list[str]
    pick: int
    metric: str = "val_loss"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])

    def result(self, study: "Study") -> dict:
        """Each candidate's mean and sd of the metric over the finished search seeds, best first, and the picks
        (None until every candidate cell of the search seeds is finished)."""
        ranking, missing = [], 0
        for method in self.candidates:
            values = [json.loads(path.read_text())[self.metric] for seed in self.seeds
                      if (path := study.result_path({}, method, seed)).exists()]
            missing += len(self.seeds) - len(values)
            if values:
                ranking.append({"method": method, "seeds": len(values), "mean": statistics.fmean(values),
                                "std": statistics.stdev(values) if len(values) > 1 else 0.0})
        ranking.sort(key=lambda row: row["mean"])
        picked = [row["method"] for row in ranking[:self.pick]] if not missing else None
        return {"ranking": ranking, "missing": missing, "picked": picked}


@dataclass
class Study:
    name: str
    title: str
    methods: list[str]
    seeds: list[int]
    baseline: str = "vanilla"
    out_dir: str = "runs/study"  # checkpoints, never committed
    results: str = "docs/results/study"  # cells/<key>/... result files and each study's report
    more_seeds: list[int] = field(default_factory=list)
    contrasts: list[list[str]] = field(default_factory=list)
    paper: dict = field(default_factory=dict)  # method -> the paper's number, shown beside ours
    describe: dict = field(default_factory=dict)  # method -> what it changes, in the paper's words
    start_from: str = ""  # retrofitting: every cell starts from this method's final model, same seed, in `parent`
    search: Search | None = None  # a pre-registered search among the methods (base setting only)
    confirm: dict = field(default_factory=dict)  # from (a search study's config) and against; see the module doc
    waiting: str = ""  # why a confirmation study has not its picks yet
    parent: "Study | None" = None  # the study this one extends
    axes: list[Axis] = field(default_factory=list)
    datasets: dict = field(default_factory=dict)  # path -> prepare settings
    base: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> "Study":
        path = Path(path)
        data = read_toml(path, "study config", "configs/study/")
        unknown = set(data) - {"study", "axes", "datasets", "base"}
        if unknown:
            raise ValueError(f"{path}: unknown sections {sorted(unknown)}; a study has [study], [axes.*], "
                             "[datasets.*] and [base.*]")
        head = dict(data.get("study", {}))
        parent = None
        if "extends" in head:  # another study's [base] and [datasets], under this file's
            parent = path.parent / head.pop("extends")
            if not parent.is_file():
                raise FileNotFoundError(f"{path}: extends {parent}, which does not exist")
            inherited = read_toml(parent, "study config", "configs/study/")
            data["datasets"] = {**inherited.get("datasets", {}), **data.get("datasets", {})}
            data["base"] = _merge(inherited.get("base", {}), data.get("base", {}))
        known = {"title", "methods", "seeds", "out_dir", "results", "baseline", "more_seeds", "contrasts", "paper",
                 "describe", "start_from", "search", "confirm"}
        if set(head) - known:
            raise ValueError(f"{path}: unknown [study] keys {sorted(set(head) - known)}; known: {', '.join(sorted(known))}")
        missing = {"methods", "seeds"} - set(head)
        if missing:
            raise ValueError(f"{path}: [study] needs {', '.join(sorted(missing))}")
        axes = []
        for name, axis in data.get("axes", {}).items():
            if set(axis) not in ({"key", "values"}, {"values"}):
                raise ValueError(f"{path}: [axes.{name}] needs key and values, or values only (each a table of keys), "
                                 f"got {sorted(axis)}")
            values = axis["values"]
            if not isinstance(values, dict):
                values = {str(v): v for v in values}
            if not values:
                raise ValueError(f"{path}: [axes.{name}] has no values")
            if "key" not in axis and not all(isinstance(v, dict) and v for v in values.values()):
                raise ValueError(f"{path}: [axes.{name}] has no key, so each value must be a table of "
                                 'training-config keys, e.g. {"train.steps" = 800}')
            axes.append(Axis(name, axis.get("key"), values))
        datasets = {}
        for name, spec in data.get("datasets", {}).items():
            if set(spec) - {"path", "vocab_size"} or "path" not in spec:
                raise ValueError(f"{path}: [datasets.{name}] takes path and vocab_size, got {sorted(spec)}")
            datasets[spec["path"]] = {"vocab_size": spec.get("vocab_size", 4096)}
        head.setdefault("title", path.stem)
        if head.get("start_from") and parent is None:
            raise ValueError(f"{path}: start_from names a method of the study this one extends; add extends")
        if "search" in head:
            try:
                head["search"] = Search(**head["search"])
            except TypeError as err:
                raise ValueError(f"{path}: [study.search] takes candidates, pick, metric and seeds ({err})") from None
        study = cls(name=path.stem, axes=axes, datasets=datasets, base=data.get("base", {}),
                    parent=cls.load(parent) if parent else None, **head)
        if study.confirm:
            study.add_picks(path.parent)
        return study.check()

    def add_picks(self, folder: Path) -> None:
        """A confirmation study: the picks of the search it names join its methods, each contrasted with
        `against`, once that search is complete."""
        if set(self.confirm) != {"from", "against"}:
            raise ValueError(f"[study.confirm] takes from (a study config with a [study.search]) and against (a "
                             f"method), got {sorted(self.confirm)}")
        search = Study.load(folder / self.confirm["from"])
        if search.search is None:
            raise ValueError(f"[study.confirm] from = {self.confirm['from']!r}: that study has no [study.search]")
        search.results = self.results
        result = search.search.result(search)
        self.waiting = ""
        if result["picked"] is None:
            self.waiting = (f"the search of {search.name} has {result['missing']} candidate cells to go; its two picks "
                            "join this study when they are in")
            return
        for method in result["picked"]:
            if method not in self.methods:
                self.methods.append(method)
            if [method, self.confirm["against"]] not in self.contrasts:
                self.contrasts.append([method, self.confirm["against"]])

    def check(self) -> "Study":
        if self.start_from and self.start_from not in self.parent.methods:
            raise ValueError(f"start_from {self.start_from!r} must be one of the parent study's methods "
                             f"{self.parent.methods}")
        for method in self.methods:
            if method not in PRESETS:
                raise ValueError(f"study method {method!r} is not a preset; choose from {', '.join(PRESETS)}")
        if self.baseline not in self.methods:
            raise ValueError(f"the baseline {self.baseline!r} must be one of the study's methods {self.methods}")
        for table in ("paper", "describe"):
            if set(getattr(self, table)) - set(self.methods):
                raise ValueError(f"[study.{table}] names {sorted(set(getattr(self, table)) - set(self.methods))}, "
                                 f"which are not among the study's methods {self.methods}")
        for pair in self.contrasts:
            if len(pair) != 2 or not set(pair) <= set(self.methods):
                raise ValueError(f"contrast {pair} must name two of the study's methods {self.methods}")
        if self.search is not None:
            if not self.search.candidates or set(self.search.candidates) - set(self.methods):
                raise ValueError(f"[study.search] candidates {self.search.candidates} must be some of the study's "
                                 f"methods {self.methods}")
            if not 1 <= self.search.pick <= len(self.search.candidates) or self.axes:
                raise ValueError("[study.search] picks 1 .. len(candidates) methods, in a study without axes")
            if set(self.search.seeds) - set(self.seeds):
                raise ValueError(f"[study.search] seeds {self.search.seeds} must be among the study's seeds {self.seeds}")
        seeds = self.seeds + self.more_seeds
        if not self.seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds and more_seeds must be distinct and seeds non-empty, got {seeds}")
        for setting in self.settings():  # every cell's config is valid before anything trains
            self.cell_config(setting, self.methods[0], self.seeds[0])
        return self

    def settings(self) -> list[dict[str, str]]:
        """Every combination of axis labels, in the order of the axes: [{axis name: label}, ...]."""
        combos = itertools.product(*[list(axis.values) for axis in self.axes])
        return [dict(zip([axis.name for axis in self.axes], labels)) for labels in combos]

    def setting_config(self, setting: dict) -> dict:
        data = json.loads(json.dumps(self.base))  # a deep copy
        for axis in self.axes:
            axis.apply(data, setting[axis.name])
        if self.start_from:  # the parent's models by their path, so that the cell key tells where a cell started
            start = Path(self.parent.out_dir) / self.parent.cell_path({}, self.start_from, "{seed}") / "final"
            data.setdefault("model", {})["init_from"] = str(start)
        return data

    def cell_path(self, setting: dict, method: str, seed: int) -> Path:
        return Path(cell_key(self.setting_config(setting))) / method / f"seed_{seed}"

    def result_path(self, setting: dict, method: str, seed: int) -> Path:
        return Path(self.results) / "cells" / self.cell_path(setting, method, seed).with_suffix(".json")

    def cell_config(self, setting: dict, method: str, seed: int) -> TrainConfig:
        data = self.setting_config(setting)
        data.setdefault("model", {})["method"] = method
        if self.start_from:  # retrofitting: each seed starts from its own model of the parent study
            data["model"]["init_from"] = data["model"]["init_from"].format(seed=seed)
        cell = self.cell_path(setting, method, seed)
        data.setdefault("train", {}).update(seed=seed, out_dir=str(Path(self.out_dir) / cell))
        return TrainConfig.from_dict(data, source=f"study {self.name}, {setting_label(setting) or 'base'}, {cell}")

    def start_config(self, seed: int) -> TrainConfig:
        """The training config of the parent study's base-setting cell that `start_from` names."""
        return self.parent.cell_config({}, self.start_from, seed)

    def read_results(self) -> list[dict]:
        """The result of every finished cell of this study, with its setting."""
        results = []
        for setting in self.settings():
            for method in self.methods:
                for seed in self.seeds + self.more_seeds:
                    path = self.result_path(setting, method, seed)
                    if path.exists():
                        results.append({**json.loads(path.read_text()), "setting": setting})
        return results


# settings that change neither the model nor its training, so they do not enter a cell's key
_NOT_IN_KEY = {"train": {"out_dir", "progress", "log_every", "checkpoint_every", "keep_checkpoints"}, "logging": "*"}


def cell_key(config: dict) -> str:
    """A short hash of a training config's settings that differ from the defaults, without its method and seed:
    the same settings give the same key, and a new config field with a default keeps every existing key."""
    full = TrainConfig.from_dict(json.loads(json.dumps(config)), source="study cell").to_dict()
    defaults = TrainConfig().to_dict()
    full["model"].pop("method")
    full["train"].pop("seed")
    chosen = {}
    for section, values in full.items():
        skipped = _NOT_IN_KEY.get(section, ())
        if skipped == "*":
            continue
        changed = {k: v for k, v in values.items() if k not in skipped and v != defaults[section][k]}
        if changed:
            chosen[section] = changed
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:10]


def _merge(base: dict, top: dict) -> dict:
    merged = dict(base)
    for key, value in top.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def set_key(data: dict, key: str, value) -> None:
    parts = key.split(".")
    if len(parts) < 2:
        raise ValueError(f"axis key {key!r} must name a config section and key, e.g. model.overrides.num_hidden_layers")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def setting_label(setting: dict) -> str:
    return ",".join(f"{name}={label}" for name, label in setting.items())


# ---------------------------------------------------------------- running cells


def ensure_dataset(study: Study, path: str) -> None:
    if (Path(path) / MANIFEST_NAME).exists():
        return
    if path not in study.datasets:
        raise FileNotFoundError(f"{path} holds no prepared data; run depthattn prepare --out {path}, or declare it "
                                f"under [datasets.NAME] in the study config so the study prepares it")
    print(f"preparing the embedded corpus into {path} ({study.datasets[path]})")
    prepare(["embedded"], Path(path), **study.datasets[path])


def run_cell(study: Study, setting: dict, method: str, seed: int, threads: int | None = None) -> dict:
    """Train (or resume) one cell, score the whole validation split, and write the cell's result file."""
    path = study.result_path(setting, method, seed)
    if path.exists():
        return json.loads(path.read_text())
    if threads:
        torch.set_num_threads(threads)
    cfg = study.cell_config(setting, method, seed)
    started = time.perf_counter()
    train(cfg, resume=True)
    cell = Path(cfg.train.out_dir)
    records = read_metrics(cell / "metrics.jsonl")
    model = load_model(cell / "final", device="cpu")
    val = TokenShards(cfg.data.path, "val")
    scored = compute_perplexity(model, val, block_size=cfg.data.seq_len,
                                tokenizer=load_tokenizer(Path(cfg.data.path) / TOKENIZER_DIR))
    result = {
        "method": method, "seed": seed,
        "val_loss": scored["loss"], "val_bits_per_byte": scored["bits_per_byte"],
        "val_tokens": scored["tokens"], "val_bytes": scored["bytes"],
        "train_tokens": records[-1]["tokens"], "final_train_loss": records[-1]["loss"],
        "curve": [[r["tokens"], r["val_loss"]] for r in records if "val_loss" in r],  # eval-subset loss
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in records if "tokens_per_s" in r),
        **{f"params_{k}": v for k, v in count_parameters(model).items()},
        "seconds": time.perf_counter() - started, "threads": torch.get_num_threads(),
        "config": cfg.to_dict(), **run_metadata(),
    }
    result["config"]["train"].pop("out_dir")
    atomic_write_json(path, result)
    return result


def pending_cells(study: Study, seeds: list[int] | None = None, methods: list[str] | None = None) -> list[tuple]:
    """Cells without a result file, seed-major so early results cover every method of every setting."""
    seeds = seeds or study.seeds
    methods = methods or study.methods
    return [(setting, method, seed) for seed in seeds for setting in study.settings() for method in methods
            if not study.result_path(setting, method, seed).exists()]


def uncertain_cells(study: Study) -> list[tuple]:
    """The more_seeds cells of each (setting, method) whose difference to the baseline still spans zero."""
    if not study.more_seeds:
        return []
    table = summarize(study, study.read_results())
    wanted = []
    for setting in study.settings():
        rows = table[setting_label(setting)]["rows"]
        unsure = [r["method"] for r in rows if "diff_low" in r and r["diff_low"] < 0 < r["diff_high"]]
        unsure += [m for pair in study.contrasts for c in table[setting_label(setting)]["contrasts"]
                   if c["pair"] == pair and c.get("diff_low", 0) < 0 < c.get("diff_high", 0) for m in pair]
        for method in dict.fromkeys([study.baseline, *unsure] if unsure else []):
            wanted += [(setting, method, s) for s in study.more_seeds
                       if not study.result_path(setting, method, s).exists()]
    return wanted


def train_start(study: Study, seed: int, threads: int | None = None) -> None:
    """Train (or resume) the model a retrofitting study's cells of `seed` start from, unless it is there: its
    result may be committed while its checkpoints, never committed, are on another machine."""
    cfg = study.start_config(seed)
    if not (Path(cfg.train.out_dir) / "final" / "model.safetensors").exists():
        if threads:
            torch.set_num_threads(threads)
        train(cfg, resume=True)


def run_study(study: Study, workers: int = 1, threads: int | None = None, methods=None, seeds=None) -> None:
    for path in {study.cell_config(s, study.methods[0], study.seeds[0]).data.path for s in study.settings()}:
        ensure_dataset(study, path)
    if study.start_from:  # one process per seed: cells of a seed share their starting model
        starts = sorted({cell[2] for cell in pending_cells(study, seeds, methods)})
        if workers == 1 or len(starts) <= 1:
            for seed in starts:
                train_start(study, seed, threads)
        else:
            with ProcessPoolExecutor(min(workers, len(starts))) as pool:
                list(pool.map(train_start, [study] * len(starts), starts, [threads] * len(starts)))
    rounds = [lambda: pending_cells(study, seeds, methods)]
    if seeds is None and methods is None:
        rounds.append(lambda: uncertain_cells(study))
    for cells_of in rounds:
        cells = cells_of()
        if not cells:
            continue
        print(f"study {study.name}: {len(cells)} cells to run, {workers} at a time")
        if workers == 1:
            for i, cell in enumerate(cells, 1):
                print(f"[{i}/{len(cells)}] {setting_label(cell[0]) or 'default'} {cell[1]} seed {cell[2]}")
                run_cell(study, *cell, threads=threads)
            continue
        with ProcessPoolExecutor(workers) as pool:
            futures = [pool.submit(run_cell, study, *cell, threads) for cell in cells]
            for i, (cell, future) in enumerate(zip(cells, futures), 1):
                result = future.result()
                print(f"[{i}/{len(cells)}] {setting_label(cell[0]) or 'default'} {cell[1]} seed {cell[2]}: "
                      f"val loss {result['val_loss']:.4f} ({result['seconds']:.0f} s)", flush=True)


# ---------------------------------------------------------------- statistics


def paired_difference(values: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> dict:
    """method - baseline over paired seeds: mean, sd, two-sided paired t-test and its confidence interval."""
    diffs = [a - b for a, b in zip(values, baseline, strict=True)]
    out = {"n": len(diffs), "diff_mean": statistics.fmean(diffs),
           "diff_std": statistics.stdev(diffs) if len(diffs) > 1 else 0.0, "wins": sum(d < 0 for d in diffs),
           "p_value": math.nan, "diff_low": math.nan, "diff_high": math.nan}
    if len(diffs) > 1 and out["diff_std"] > 0:
        try:
            from scipy.stats import ttest_rel
        except ImportError:
            raise ImportError("the paired test needs scipy: pip install 'depthattn[analysis]'") from None
        test = ttest_rel(values, baseline)
        interval = test.confidence_interval(confidence)
        out.update(p_value=float(test.pvalue), diff_low=float(interval.low), diff_high=float(interval.high))
    return out


def _paired(results: list[dict], a: str, b: str, key: str) -> tuple[list[float], list[float]]:
    by_seed = {m: {r["seed"]: r[key] for r in results if r["method"] == m} for m in (a, b)}
    seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
    return [by_seed[a][s] for s in seeds], [by_seed[b][s] for s in seeds]


def summarize(study: Study, results: list[dict], key: str = "val_loss") -> dict:
    """Per setting label: rows (one per method with results) and contrasts, differences paired by seed."""
    table = {}
    for setting in study.settings():
        label = setting_label(setting)
        cells = [r for r in results if r["setting"] == setting]
        rows = []
        for method in study.methods:
            runs = [r for r in cells if r["method"] == method]
            if not runs:
                continue
            values = [r[key] for r in runs]
            row = {"method": method, "seeds": len(runs), "mean": statistics.fmean(values),
                   "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                   "extra_params": runs[0]["params_extra_over_vanilla"],
                   "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in runs)}
            if method != study.baseline:
                pair = _paired(cells, method, study.baseline, key)
                if pair[0]:
                    row.update(paired_difference(*pair))
            rows.append(row)
        contrasts = []
        for a, b in study.contrasts:
            pair = _paired(cells, a, b, key)
            if pair[0]:
                contrasts.append({"pair": [a, b], **paired_difference(*pair)})
        table[label] = {"setting": setting, "rows": rows, "contrasts": contrasts}
    return table


# ---------------------------------------------------------------- report


def format_interval(row: dict) -> str:
    if "diff_mean" not in row:
        return "—"
    if math.isnan(row["diff_low"]):
        return f"{row['diff_mean']:+.4f} (n={row['n']})"
    return f"{row['diff_mean']:+.4f} [{row['diff_low']:+.4f}, {row['diff_high']:+.4f}]"


def verdict(row: dict) -> str:
    """'better' / 'worse' when the 95% interval excludes zero, else 'no difference shown'."""
    if "diff_low" not in row or math.isnan(row["diff_low"]):
        return "too few seeds"
    if row["diff_high"] < 0:
        return "better"
    if row["diff_low"] > 0:
        return "worse"
    return "no difference shown"


def markdown_report(study: Study, results: list[dict]) -> str:
    loss, bpb = summarize(study, results, "val_loss"), summarize(study, results, "val_bits_per_byte")
    lines = [f"### {study.title}", "",
             f"`depthattn study configs/study/{study.name}.toml`; val loss = mean next-token loss (nats) over the "
             f"whole held-out split; Δ = method − {study.baseline} paired by seed, with its 95% t-interval; "
             "negative is better.", ""]
    if study.waiting:
        lines += [f"Waiting: {study.waiting}.", ""]
    if study.search:
        lines += [*_search_table(study), ""]
    for label, table in loss.items():
        if not table["rows"]:
            continue
        cells = [r for r in results if r["setting"] == table["setting"]]
        head = cells[0]
        if label:
            lines += [f"**{label}**", ""]
        lines += [f"Training: {head['train_tokens']:,} tokens per run; cell key "
                  f"`{study.cell_path(table['setting'], study.baseline, 0).parts[0]}`"
                  f"{_last_quarter(study.baseline, cells)}.", "",
                  "| method |" + (" variant |" if study.describe else "") +
                  f" seeds | val loss (mean ± sd) | bits/byte | Δ loss vs {study.baseline} [95% CI] | p "
                  "| seeds better | verdict | extra params |" + (" paper |" if study.paper else ""),
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if study.describe else "")
                  + ("---|" if study.paper else "")]
        bpb_rows = {r["method"]: r for r in bpb[label]["rows"]}
        for r in table["rows"]:
            p = f"{r['p_value']:.3f}" if "p_value" in r and not math.isnan(r["p_value"]) else "—"
            wins = f"{r['wins']}/{r['n']}" if "wins" in r else "—"
            lines.append(
                f"| {r['method']} |" + (f" {study.describe.get(r['method'], '')} |" if study.describe else "") +
                f" {r['seeds']} | {r['mean']:.4f} ± {r['std']:.4f} | "
                f"{bpb_rows[r['method']]['mean']:.4f} | {format_interval(r)} | {p} | {wins} | "
                f"{verdict(r) if 'diff_mean' in r else '—'} | {r['extra_params']:,} |"
                + (f" {study.paper.get(r['method'], '—')} |" if study.paper else ""))
        if study.start_from:
            lines += ["", *_curve_table(study, cells)]
        for c in table["contrasts"]:
            a, b = c["pair"]
            p = "" if math.isnan(c["p_value"]) else f", p = {c['p_value']:.3f}"
            lines += ["", f"{a} − {b}: {format_interval(c)}{p}, {a} lower in {c['wins']}/{c['n']} "
                          f"seeds: **{verdict(c).replace('better', f'{a} better').replace('worse', f'{b} better')}**."]
        lines.append("")
    return "\n".join(lines) + "\n"


def _search_table(study: Study) -> list[str]:
    """The pre-registered search: its rule, each candidate's mean over the search seeds, and the picks."""
    search = study.search
    result = search.result(study)
    seeds = ", ".join(map(str, search.seeds))
    lines = [f"Pre-registered search (written in `configs/study/{study.name}.toml` before its cells ran): the "
             f"{search.pick} candidates with the lowest mean {search.metric} over seeds {seeds} go on.", "",
             f"| rank | candidate | seeds | mean {search.metric} ± sd |", "|---|---|---|---|"]
    for rank, row in enumerate(result["ranking"], 1):
        lines.append(f"| {rank} | {row['method']} | {row['seeds']} | {row['mean']:.4f} ± {row['std']:.4f} |")
    if result["picked"] is None:
        lines += ["", f"Not decided yet: {result['missing']} candidate cells to go."]
    else:
        lines += ["", f"Picked: **{'**, **'.join(result['picked'])}**."]
    return lines


def _curve(cell: dict) -> dict[int, float]:
    """A cell's eval-subset curve, stored as [tokens, loss] pairs, as {tokens: loss}."""
    return dict(map(tuple, cell["curve"]))


def _last_quarter(method: str, cells: list[dict]) -> str:
    """How far `method`'s eval-subset loss (mean over seeds) still fell over the last quarter of training: how
    flat the curve is where the budget ends."""
    curves = [_curve(r) for r in cells if r["method"] == method and r["curve"]]
    if not curves:
        return ""
    tokens = sorted(set.intersection(*[set(curve) for curve in curves]))
    end = tokens[-1]
    start = min(tokens, key=lambda t: abs(t - 0.75 * end))
    if start == end:
        return ""
    before, after = (statistics.fmean(curve[t] for curve in curves) for t in (start, end))
    return (f"; {method}'s eval-subset loss over the last quarter of training ({start:,} to {end:,} tokens): "
            f"{before:.3f} to {after:.3f} ({after - before:+.3f})")


def _curve_table(study: Study, cells: list[dict]) -> list[str]:
    """Eval-subset val loss along training, mean ± sd over seeds: where started models begin (tokens 0) and go."""
    curves = {m: [_curve(r) for r in cells if r["method"] == m] for m in study.methods}
    tokens = sorted({t for runs in curves.values() for run in runs for t in run})
    lines = ["Along training (eval-subset val loss, mean ± sd over seeds; tokens 0 = the starting model converted):", "",
             "| method | " + " | ".join(f"{t:,} tokens" for t in tokens) + " |", "|---|" + "---|" * len(tokens)]
    for method, runs in curves.items():
        values = [[run[t] for run in runs if t in run] for t in tokens]
        lines.append(f"| {method} | " + " | ".join(
            f"{statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}" if len(v) > 1 else (f"{v[0]:.4f}" if v else "—")
            for v in values) + " |")
    return lines


def plot_differences(study: Study, results: list[dict], out_png: Path) -> Path | None:
    """Paired Δ val loss vs the baseline with its 95% interval: against the first axis, or per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import save_figure

    table = summarize(study, results)
    methods = [m for m in study.methods if m != study.baseline]
    axis = study.axes[0] if study.axes else None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    labels = list(table)
    for i, method in enumerate(methods):
        xs, ys, lows, highs = [], [], [], []
        for j, label in enumerate(labels):
            row = next((r for r in table[label]["rows"] if r["method"] == method and "diff_mean" in r), None)
            if row is None:
                continue
            x = j + (i - (len(methods) - 1) / 2) * 0.08 if axis else i
            low, high = (row["diff_low"], row["diff_high"]) if not math.isnan(row["diff_low"]) else (row["diff_mean"],) * 2
            xs.append(x), ys.append(row["diff_mean"]), lows.append(row["diff_mean"] - low), highs.append(high - row["diff_mean"])
        if xs:
            ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-" if axis else "o", capsize=3, color=f"C{i}", label=method)
    ax.axhline(0, color="black", lw=0.8)
    if axis:
        ax.set_xticks(range(len(labels)), [table[l]["setting"][axis.name] for l in labels])
        ax.set_xlabel(axis.name)
    else:
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_ylabel(f"Δ val loss vs {study.baseline} (nats), 95% CI")
    ax.set_title(study.title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_curve_differences(study: Study, results: list[dict], out_png: Path) -> Path:
    """Paired Δ of the validation curves (eval subset) against training tokens: where the gap goes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import save_figure

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = ["-", "--", ":", "-."]
    for s, setting in enumerate(study.settings()):
        cells = [r for r in results if r["setting"] == setting]
        base = {r["seed"]: _curve(r) for r in cells if r["method"] == study.baseline}
        for i, method in enumerate(m for m in study.methods if m != study.baseline):
            runs = [r for r in cells if r["method"] == method and r["seed"] in base]
            if not runs:
                continue
            tokens = [t for t, _ in runs[0]["curve"]]
            diffs = [[v - base[r["seed"]][t] for t, v in r["curve"]] for r in runs]
            mean = [statistics.fmean(d) for d in zip(*diffs)]
            ax.plot(tokens, mean, styles[s % len(styles)], color=f"C{i}",
                    label=f"{method} {setting_label(setting)} ({len(runs)} seeds)")
            if len(runs) > 1:
                ax.fill_between(tokens, [min(d) for d in zip(*diffs)], [max(d) for d in zip(*diffs)],
                                color=f"C{i}", alpha=0.1)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"Δ val loss vs {study.baseline} (nats; eval subset)")
    ax.set_title(f"{study.title}: mean over seeds, shaded min-max", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out_png)


def write_report(study: Study) -> Path:
    """results/<name>.md, .json and plots from the committed cell results (no training)."""
    results = study.read_results()
    root = Path(study.results)
    text = markdown_report(study, results)
    if results:
        text += f"\n![Δ vs {study.baseline}]({study.name}_difference.png)\n"
        text += f"\n![Δ along training]({study.name}_curves.png)\n"
        plot_differences(study, results, root / f"{study.name}_difference.png")
        plot_curve_differences(study, results, root / f"{study.name}_curves.png")
    atomic_write_bytes(root / f"{study.name}.md", text.encode())
    summary = {label: table for label, table in summarize(study, results).items()}
    atomic_write_json(root / f"{study.name}.json", {"study": study.name, "title": study.title, "summary": summary})
    return root / f"{study.name}.md"


def explain(study: Study, seed: int = 0) -> Path:
    """Why the methods differ, for each setting's seed-`seed` models (read from out_dir): the depth-weight map of
    every Depth-Attention variant and the learned mixing weights of the other methods that have them
    (`CrossLayerMethod.layer_mixing`: value residual's lambdas), per layer, in <results>/<name>_why.*."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .depth_map import compute_depth_map
    from .plots import plot_depth_map, save_figure

    root, found = Path(study.results), {}
    for setting in study.settings():
        label = setting_label(setting) or "base"
        for method in study.methods:
            final = Path(study.out_dir) / study.cell_path(setting, method, seed) / "final"
            if not (final / "model.safetensors").exists():
                continue
            data = study.cell_config(setting, method, seed).data
            if PRESETS[method].get("cross_layer") == "depth_attention":
                result = compute_depth_map(final, data.path, samples=32, seq_len=data.seq_len, device="cpu")
                found.setdefault(label, {})[method] = {"depth_map": result["matrix"], "sources": result["sources"]}
                plot_depth_map(result["matrix"], root / f"{study.name}_why_{method}_{label}.png", title=(
                    f"{method}, {label}, seed {seed}: mean depth weight (row: layer, column: source)"))
            elif mixing := load_model(final, device="cpu").model.cross_layer.layer_mixing():
                found.setdefault(label, {})[method] = {"mixing": mixing}
    if not found:
        raise FileNotFoundError(f"no seed-{seed} models of study {study.name} under {study.out_dir}; run the study first")
    for label, methods in found.items():
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for i, (method, info) in enumerate(methods.items()):
            if "mixing" in info:
                for (name, weights), style in zip(info["mixing"].items(), itertools.cycle(("s-", "s--", "s:"))):
                    ax.plot(range(1, len(weights) + 1), weights, style, color=f"C{i}", label=f"{method} {name}")
            else:
                matrix = info["depth_map"]
                layers = range(1, len(matrix))
                ax.plot(layers, [matrix[l][0] for l in layers], "o-", color=f"C{i}", label=f"{method}: weight on layer 0")
                ax.plot(layers, [matrix[l][l] for l in layers], "o:", color=f"C{i}", label=f"{method}: own value")
        ax.set_xlabel("layer")
        ax.set_ylabel("mean weight / learned lambda")
        ax.set_title(f"{study.title}: {label}, seed {seed}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, root / f"{study.name}_why_{label}.png")
    atomic_write_json(root / f"{study.name}_why.json", {"seed": seed, "settings": found})
    return root / f"{study.name}_why.json"


def _cell(row: dict | None) -> str:
    return f"{format_interval(row)}: {verdict(row)}" if row and "diff_mean" in row else "—"


def _cell_paths(studies: list[Study], seeds_of) -> set[Path]:
    return {study.result_path(setting, method, seed) for study in studies for setting in study.settings()
            for method in study.methods for seed in seeds_of(study)}


def _progress(studies: list[Study]) -> str:
    first = _cell_paths(studies, lambda study: study.seeds)
    more = _cell_paths(studies, lambda study: study.more_seeds) - first  # a cell may be another study's first seed
    wanted = {study.result_path(*cell) for study in studies for cell in uncertain_cells(study)} - first
    line = (f"Finished: {sum(p.exists() for p in first)} of the {len(first)} distinct cells of {len(studies)} "
            f"studies at their first seeds")
    if more:
        line += (f"; more seeds where an interval spanned zero: {sum(p.exists() for p in more)} finished, "
                 f"{len(wanted)} still wanted")
    return line + "."


def plot_overview(entries: list[dict], out_png: Path) -> Path:
    """The index's table (`setting_differences`) as one figure: per setting, each paired difference with its
    95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import save_figure

    names = ["DA − vanilla", "VR − vanilla", "DA − VR"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(entries)), 4.5))
    for i, name in enumerate(names):
        shown = [(j, entry[name]) for j, entry in enumerate(entries)
                 if entry[name] and not math.isnan(entry[name].get("diff_low", math.nan))]
        if shown:
            means = [row["diff_mean"] for _, row in shown]
            errors = [[m - row["diff_low"] for m, (_, row) in zip(means, shown)],
                      [row["diff_high"] - m for m, (_, row) in zip(means, shown)]]
            ax.errorbar([j + (i - 1) * 0.2 for j, _ in shown], means, yerr=errors, fmt="o", capsize=3, color=f"C{i}",
                        label=name)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(entries)), [f"{e['label']}\n({e['study']})" for e in entries], fontsize=8)
    ax.set_ylabel("Δ val loss (nats), 95% CI; below 0: the first is better")
    ax.set_title("Depth-Attention (DA) and value residual (VR) against vanilla, every setting", fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing to show before two seeds of a setting
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_png)


def setting_differences(studies: list[Study]) -> list[dict]:
    """Per distinct setting with Depth-Attention results (the first study to hold it names it): its label,
    study, train tokens, and the paired rows "DA − vanilla", "VR − vanilla" and "DA − VR" (None when not run)."""
    seen, entries = set(), []
    for study in studies:
        results = study.read_results()
        for label, table in summarize(study, results).items():
            key = study.cell_path(table["setting"], study.baseline, 0).parts[0]
            rows = {r["method"]: r for r in table["rows"]}
            if key in seen or "depth_attention" not in rows:
                continue
            seen.add(key)
            entries.append({
                "label": label or "base", "study": study.name,
                "train_tokens": next(r["train_tokens"] for r in results if r["setting"] == table["setting"]),
                "DA − vanilla": rows["depth_attention"], "VR − vanilla": rows.get("value_residual"),
                "DA − VR": next((c for c in table["contrasts"] if c["pair"] == ["depth_attention", "value_residual"]),
                                None)})
    return entries


def write_index(studies: list[Study], path: Path) -> Path:
    """One page for the whole study: every distinct setting's key differences, then each study's report."""
    lines = ["# Where Depth-Attention stands: the study", "",
             "Generated by `make study` (`depthattn study configs/study/*.toml --index docs/results/study.md`) from the "
             "committed cell results in `docs/results/study/cells/`; do not edit by hand. Each cell trains one method "
             "with one seed; cells of the same setting and seed share the data order and the backbone's initial "
             "weights, so differences are paired by seed. Val loss: nats per token on the whole held-out split "
             "of the embedded corpus. Δ: the paired difference with its 95% t-interval; "
             "'better' / 'worse' only where that interval excludes zero.", "",
             _progress(studies), "",
             "## Depth-Attention against vanilla and value residual, every setting", "",
             "| setting | study | train tokens | seeds | DA − vanilla | VR − vanilla | DA − VR |", "|---|---|---|---|---|---|---|"]
    entries = setting_differences(studies)
    for entry in entries:
        da, vr, contrast = entry["DA − vanilla"], entry["VR − vanilla"], entry["DA − VR"]
        lines.append(f"| {entry['label']} | {entry['study']} | {entry['train_tokens']:,} | {da['seeds']} | "
                     f"{_cell(da)} | {_cell(vr)} | {_cell(contrast)} |")
    figure = plot_overview(entries, Path(studies[0].results) / "overview.png")
    lines += ["", f"![every setting]({Path(studies[0].results).name}/{figure.name})"]
    for study in studies:
        text = markdown_report(study, study.read_results()).replace("](", f"]({Path(study.results).name}/")
        lines += ["", text]
        why = Path(study.results) / f"{study.name}_why.json"
        if why.exists():
            for label in json.loads(why.read_text())["settings"]:
                lines += [f"![why: {label}]({Path(study.results).name}/{study.name}_why_{label}.png)", ""]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", help="study configs (configs/study/*.toml), run in this order")
    parser.add_argument("--report-only", action="store_true", help="write the reports from finished cells; train nothing")
    parser.add_argument("--workers", type=int, default=1, help="cells trained at once (processes)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--methods", nargs="+", help="run only these methods")
    parser.add_argument("--seeds", nargs="+", type=int, help="run only these seeds")
    parser.add_argument("--why", action="store_true", help="also write depth-weight maps and learned mixing weights "
                        "(value residual's lambdas) of seed 0 (needs the cells' models in the out dir)")
    parser.add_argument("--index", help="also write one page for all the given studies (docs/results/study.md)")
    parser.add_argument("--out-dir", help="checkpoints and logs (default: the config's out_dir, runs/study)")
    parser.add_argument("--results", help="cell results and reports (default: the config's results, docs/results/study)")


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    studies = [Study.load(path) for path in args.configs]
    for path, study in zip(args.configs, studies):
        study.out_dir = args.out_dir or study.out_dir
        study.results = args.results or study.results
        if study.confirm:  # the picks of the search as it stands in these results
            study.add_picks(Path(path).parent)
        if study.waiting:
            print(f"study {study.name}: {study.waiting}")
    for study in studies:
        if not args.report_only:
            started = time.perf_counter()
            run_study(study, args.workers, args.threads, args.methods, args.seeds)
            print(f"study {study.name}: done in {time.perf_counter() - started:.0f} s")
        print(f"report: {write_report(study)}")
        if args.why:
            print(f"why: {explain(study)}")
    if args.index:
        print(f"index: {write_index(studies, Path(args.index))}")
    return 0
