"""A study's definition: its config file (the format: `depthattn.study`), its settings and cells, and each cell's
key, a hash of its training config, under which its checkpoints and its result file are stored."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config import did_you_mean
from ..data.sources import LINUX_DOC, WIKIPEDIA
from ..presets import METHOD_PRESETS
from ..train.config import TrainConfig, build_model_config, config_path, read_toml
from .records import Cell, setting_label

CHECKED_INPUTS = (WIKIPEDIA, LINUX_DOC)  # the inputs whose manifest records the source text's sha256

STEPS_FRACTION = "train.steps_fraction"  # an axis key: a fraction of the setting's train.steps (budget ladders)
# a multiplier reading the baseline's curve past this many passes over the data is flagged (repeating the data
# flattens the curve, which inflates multipliers), and the fits keep the budgets trained within it
REPEATS_FLAG = 2.0
SEARCH_METRICS = ("val_loss", "val_bits_per_byte", "final_train_loss")  # a cell result's, lower is better


@dataclass(frozen=True)
class Axis:
    name: str
    key: str | None  # "section.key" or "model.overrides.field"; None: each value is a table {key: value}
    values: dict  # label -> value
    branches: bool = False  # train.steps only, with WSD: every value is a cooldown branch of one run (train/)
    # values only the baseline trains: a branched axis's budgets past the others' (to extend its curve), or another
    # axis's settings (e.g. learning rates that tune the baseline alone)
    baseline_only: list[str] = field(default_factory=list)

    def apply(self, data: dict, label: str) -> None:
        """Set this axis's key(s) to the values of `label` in a training config. STEPS_FRACTION scales the
        train.steps that the base and the axes before this one set."""
        if self.key == STEPS_FRACTION:
            train = data.setdefault("train", {})
            train["steps"] = round(self.values[label] * train.get("steps", TrainConfig().train.steps))
            return
        for key, value in ({self.key: self.values[label]} if self.key else self.values[label]).items():
            set_key(data, key, value)


@dataclass(frozen=True)
class Search:
    """A pre-registered search: among `candidates`, the `pick` with the lowest mean `metric` over `seeds` go on.
    Written in the study config before its cells run; the pick is made only once every candidate has every seed
    (study/picks.py reads it from the results)."""

    candidates: list[str]
    pick: int
    metric: str = "val_loss"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])


@dataclass(frozen=True)
class Study:
    """A study's definition as its config file states it; it reads no results (whatever does is handed a
    `store.CellStore`). A confirmation study's picks join it through `picks.with_picks`, which reads its search's
    results in a store and returns a new Study."""

    # what it trains
    name: str
    title: str
    methods: list[str]
    seeds: list[int]
    baseline: str = ""  # what every other method is measured against; by default the first of `methods`
    more_seeds: list[int] = field(default_factory=list)
    contrasts: list[list[str]] = field(default_factory=list)
    axes: list[Axis] = field(default_factory=list)
    datasets: dict = field(default_factory=dict)  # path -> prepare settings
    base: dict = field(default_factory=dict)
    search: Search | None = None  # a pre-registered search among the methods (base setting only)
    # how its report reads
    paper: dict = field(default_factory=dict)  # method -> the paper's number, shown beside ours
    describe: dict = field(default_factory=dict)  # method -> what it changes, in the paper's words
    flag_epochs: float = REPEATS_FLAG  # its tables flag a multiplier read past this many epochs (the rule's)
    config_file: str = ""  # the file it was loaded from, as reports name it (relative to the working folder)
    waiting: str = ""  # why a confirmation study has not its picks yet (set by `picks.with_picks`)
    # where it lives: the config's, or what `load` was given
    out_dir: str = "runs/study"  # checkpoints, never committed
    results: str = "docs/results/study"  # cells/<key>/... result files and each study's report
    # how `--executor slurm` submits its cells
    slurm: dict = field(default_factory=dict)  # the [slurm] table (study/slurm.py)
    # links to other studies
    parent: Study | None = None  # the study this one extends
    start_from: str = ""  # retrofitting: every cell starts from this method's final model, same seed, in `parent`
    confirm: dict = field(default_factory=dict)  # from (a search study's config) and against; see the module doc
    searched: Study | None = None  # the study `confirm` takes its picks from, loaded with this one's results
    compare: dict = field(default_factory=dict)  # with (another study, loaded) and tolerance (nats)

    def __post_init__(self):
        object.__setattr__(self, "baseline", self.baseline or (self.methods[0] if self.methods else ""))
        object.__setattr__(self, "config_file", self.config_file or f"configs/study/{self.name}.toml")

    @classmethod
    def load(cls, path: str | Path, out_dir: str | None = None, results: str | None = None) -> Study:
        """The study in the config file `path`; `out_dir` and `results`, where given, replace the config's (the
        studies it links to, a search it confirms and one it compares with, read their results there too)."""
        given, path = Path(path), config_path(path)
        data = _with_ancestors(path)
        unknown = set(data) - {"study", "axes", "datasets", "base", "slurm"}
        if unknown:
            raise ValueError(f"{path}: unknown sections {sorted(unknown)}; a study has [study], [axes.*], "
                             "[datasets.*], [base.*] and [slurm]")
        head = dict(data.get("study", {}))
        parent = None
        if "extends" in head:  # its [base], [datasets] and [slurm] hold the extended studies' (_with_ancestors)
            parent = path.parent / head.pop("extends")
        known = {"title", "methods", "seeds", "out_dir", "results", "baseline", "more_seeds", "contrasts", "paper",
                 "describe", "start_from", "search", "confirm", "compare", "flag_epochs"}
        if set(head) - known:
            raise ValueError(f"{path}: unknown [study] keys {sorted(set(head) - known)}; "
                             f"known: {', '.join(sorted(known))}")
        missing = {"methods", "seeds"} - set(head)
        if missing:
            raise ValueError(f"{path}: [study] needs {', '.join(sorted(missing))}")
        axes, datasets = _axes(path, data), _datasets(path, data)
        head.setdefault("title", path.stem)
        head["out_dir"] = out_dir or head.get("out_dir", "runs/study")
        head["results"] = results or head.get("results", "docs/results/study")
        if head.get("start_from") and parent is None:
            raise ValueError(f"{path}: start_from names a method of the study this one extends; add extends")
        if "search" in head:
            try:
                head["search"] = Search(**head["search"])
            except TypeError as err:
                raise ValueError(f"{path}: [study.search] takes candidates, pick, metric and seeds ({err})") from None
        parent = cls.load(parent, out_dir, results) if parent else None  # its models are where --out-dir says
        if head.get("confirm"):
            head["searched"] = _searched(path.parent, head["confirm"], head["results"])
        if head.get("compare"):
            compare = head["compare"]
            if set(compare) != {"with", "tolerance"}:
                raise ValueError(f"{path}: [study.compare] takes with (another study config) and tolerance (nats), "
                                 f"got {sorted(compare)}")
            head["compare"] = {**compare, "with": cls.load(path.parent / compare["with"], results=head["results"])}
        study = cls(name=path.stem, config_file=_shown(given), axes=axes, datasets=datasets, base=data.get("base", {}),
                    slurm=data.get("slurm", {}), parent=parent, **head)
        return _checked(study, path)

    def check(self) -> Study:
        self._check_methods()
        if self.search is not None:
            self._check_search(self.search)
        if sum(axis.branches for axis in self.axes) > 1:
            raise ValueError("one axis at most may set branches = true")
        for name in ("seeds", "more_seeds"):
            seeds = getattr(self, name)
            if not _list_of(seeds, int) or any(s < 0 for s in seeds):
                raise ValueError(f"[study] {name} must be a list of seeds, integers >= 0, got {seeds!r}")
        seeds = self.seeds + self.more_seeds
        if not self.seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds and more_seeds must be distinct and seeds non-empty, got {seeds}")
        flag: object = self.flag_epochs  # as the config gave it
        if isinstance(flag, bool) or not isinstance(flag, int | float) or not 0 < flag <= REPEATS_FLAG:
            raise ValueError(f"[study] flag_epochs must be a number of epochs above 0 and at most {REPEATS_FLAG:g} "
                             f"(a study may flag earlier than the default, not later), got {self.flag_epochs!r}")
        self._check_settings()
        return self

    def _check_settings(self):
        """Every cell's config is valid before anything trains, each setting trains cells of its own, and the study
        alone sets what varies per cell."""
        keys: dict[str, dict] = {}
        trained: dict[str, dict] = {}  # by the config with the model as built, not as named
        for setting in self.settings():
            data = self.setting_config(setting)
            for section, name, owner in (("model", "method", "its methods"), ("train", "seed", "its seeds"),
                                         ("train", "branch_steps", "a budget axis with branches = true")):
                if name in data.get(section, {}):
                    where = f"the setting {setting_label(setting)}" if setting else "[base]"
                    raise ValueError(f"{where} sets {section}.{name}, which the study sets per cell from {owner}; "
                                     f"remove it from [base.{section}] and the axes")
            cfg = self.cell_config(Cell(setting, self.methods[0], self.seeds[0]))
            if self.branch_axis is not None and cfg.optim.schedule != "wsd":
                raise ValueError(f"[axes.{self.branch_axis.name}] branches = true needs the warmup-stable-decay "
                                 f'schedule, whose budgets branch off one run: set schedule = "wsd" in [base.optim] '
                                 f"(it is {cfg.optim.schedule!r})")
            preset_fields = {name for method in self.methods for name in METHOD_PRESETS[method]}
            if preset_fields & set(data.get("model", {}).get("overrides", {})):
                self._check_methods_differ(setting)
            key = cell_key(data)
            if key in keys:
                raise ValueError(f"the settings {setting_label(keys[key])} and {setting_label(setting)} train the "
                                 f"same cells (key {key}): a later axis, or a preset, sets what an earlier one set; "
                                 "give each setting a training config of its own")
            keys[key] = setting
            as_built = cfg.to_dict()  # with the model's config as built in place of its preset and overrides
            for name in ("preset", "overrides", "method"):  # (the method: the study sets it per cell)
                as_built["model"].pop(name)
            as_built["model"]["built"] = build_model_config(cfg, vocab_size=258, eos_id=None).to_dict()
            as_built["model"]["built"].pop("cross_layer", None)
            as_built["train"].pop("out_dir")  # named by the cell key
            same = json.dumps(as_built, sort_keys=True, default=str)
            if same in trained:
                raise ValueError(f"the settings {setting_label(trained[same])} and {setting_label(setting)} build the "
                                 "same model and train it alike: model.overrides sets every field their presets set; "
                                 "drop those from the overrides, or one of the settings")
            trained[same] = setting

    def _check_methods_differ(self, setting: Mapping[str, str]):
        """No two methods build the same model because model.overrides sets what their presets set."""
        built: dict[str, str] = {}
        for method in self.methods:
            cfg = self.cell_config(Cell(setting, method, self.seeds[0]))
            model = json.dumps(build_model_config(cfg, vocab_size=258, eos_id=None).to_dict(), sort_keys=True,
                               default=str)
            shared = sorted(set(cfg.model.overrides) & (set(METHOD_PRESETS[method]) |
                                                        set(METHOD_PRESETS[built.get(model, method)])))
            if model in built and shared:  # presets that agree at a small depth by themselves are left alone
                where = f" in the setting {setting_label(setting)}" if setting else ""
                raise ValueError(f"the methods {built[model]} and {method} build the same model{where}: "
                                 f"model.overrides sets {', '.join(shared)}, which their presets set; drop it from "
                                 "the overrides, or one of the methods")
            built[model] = method

    def _check_methods(self):
        """The methods are presets, and every method the study names elsewhere is one of them."""
        if self.start_from and self.start_from not in self.started_from.methods:
            raise ValueError(f"start_from {self.start_from!r} must be one of the parent study's methods "
                             f"{self.started_from.methods}")
        methods: object = self.methods  # whatever the TOML held
        if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
            raise ValueError(f'[study] methods must be a list of method presets, e.g. ["vanilla", '
                             f'"depth_attention"], got {methods!r}')
        if len(set(methods)) != len(methods):
            raise ValueError(f"[study] methods names {sorted({m for m in methods if methods.count(m) > 1})} twice; "
                             "name each method once")
        for method in self.methods:
            if method not in METHOD_PRESETS:
                raise ValueError(f"study method {method!r} is not a preset{did_you_mean(method, METHOD_PRESETS)}; "
                                 f"choose from {', '.join(METHOD_PRESETS)}")
        if self.baseline not in self.methods:
            raise ValueError(f"the baseline {self.baseline!r} must be one of the study's methods {self.methods}")
        for table in ("paper", "describe"):
            if set(getattr(self, table)) - set(self.methods):
                raise ValueError(f"[study.{table}] names {sorted(set(getattr(self, table)) - set(self.methods))}, "
                                 f"which are not among the study's methods {self.methods}")
        for pair in self.contrasts:
            if len(pair) != 2 or not set(pair) <= set(self.methods):
                raise ValueError(f"contrast {pair} must name two of the study's methods {self.methods}")

    def _check_search(self, search: Search):
        kinds = {"candidates": "a list of method names", "pick": "an integer", "metric": "a string",
                 "seeds": "a list of seeds, integers >= 0"}
        for name, wrong in (("candidates", not _list_of(search.candidates, str)),
                            ("pick", not _integer(search.pick)), ("metric", not isinstance(search.metric, str)),
                            ("seeds", not _list_of(search.seeds, int) or any(s < 0 for s in search.seeds))):
            if wrong:
                raise ValueError(f"[study.search] {name} must be {kinds[name]}, got {getattr(search, name)!r}")
        if not search.candidates or set(search.candidates) - set(self.methods):
            raise ValueError(f"[study.search] candidates {search.candidates} must be some of the study's "
                             f"methods {self.methods}")
        if not 1 <= search.pick <= len(search.candidates) or self.axes:
            raise ValueError("[study.search] picks 1 .. len(candidates) methods, in a study without axes")
        if search.metric not in SEARCH_METRICS:
            raise ValueError(f"[study.search] metric {search.metric!r} is not a cell result's loss"
                             f"{did_you_mean(search.metric, SEARCH_METRICS)}; choose from {', '.join(SEARCH_METRICS)}")
        if set(search.seeds) - set(self.seeds):
            raise ValueError(f"[study.search] seeds {search.seeds} must be among the study's seeds {self.seeds}")

    def settings(self) -> list[dict[str, str]]:
        """Every combination of axis labels, in the order of the axes: [{axis name: label}, ...]."""
        combos = itertools.product(*[list(axis.values) for axis in self.axes])
        return [dict(zip([axis.name for axis in self.axes], labels, strict=True)) for labels in combos]

    def setting_config(self, setting: Mapping[str, str]) -> dict:
        data = json.loads(json.dumps(self.base))  # a deep copy
        for axis in self.axes:
            axis.apply(data, setting[axis.name])
        if self.start_from:  # the parent's models by their path, so that the cell key tells where a cell started
            # "{seed}": a placeholder, filled in per cell (cell_config)
            template = Cell({}, self.start_from, "{seed}")  # type: ignore[arg-type]
            start = self.started_from.run_dir(template) / "final"
            data.setdefault("model", {})["init_from"] = str(start)
        return data

    @property
    def started_from(self) -> Study:
        """The parent study, whose models `start_from` names."""
        if self.parent is None:
            raise ValueError(f"study {self.name}: start_from {self.start_from!r} names a method of the study this "
                             "one extends, but it extends none; add extends")
        return self.parent

    @property
    def search_rule(self) -> Search:
        """The study's [study.search], for the readings of a search study (search: None without one)."""
        if self.search is None:
            raise ValueError(f"study {self.name} has no [study.search] to read")
        return self.search

    @property
    def branch_axis(self) -> Axis | None:
        return next((axis for axis in self.axes if axis.branches), None)

    @property
    def branched_axis(self) -> Axis:
        """The branched axis, for the readings only a branched study has (branch_axis: None without one)."""
        axis = self.branch_axis
        if axis is None:
            raise ValueError(f"study {self.name} has no branched axis (one with branches = true), which this "
                             "reading of its budgets needs")
        return axis

    def trains(self, setting: Mapping[str, str], method: str) -> bool:
        """Whether the study has a cell of `method` in `setting`: every method has, but where an axis's value is
        one only the baseline trains (its baseline_only)."""
        return method == self.baseline or not any(setting.get(axis.name) in axis.baseline_only for axis in self.axes)

    def run_setting(self, setting: Mapping[str, str], method: str) -> Mapping[str, str]:
        """The setting of the run that trains `setting`'s cell of `method`: itself, or with a branched axis the
        longest budget `method` trains, whose run branches off every shorter one."""
        axis = self.branch_axis
        if axis is None:
            return setting
        return self.budget_settings(setting, method)[-1]

    def budget_settings(self, setting: Mapping[str, str], method: str) -> list[Mapping[str, str]]:
        """The settings a run of `method` trains: `setting`, or with a branched axis one per budget, shortest
        first."""
        axis = self.branch_axis
        if axis is None:
            return [setting]
        budgets = [{**setting, axis.name: label} for label, _ in sorted(axis.values.items(), key=lambda lv: lv[1])]
        return [budget for budget in budgets if self.trains(budget, method)]

    def cells(self, seeds: list[int] | None = None) -> list[Cell]:
        """Every cell the study trains with `seeds` (by default its seeds and more_seeds), setting by setting."""
        return [Cell(setting, method, seed) for setting in self.settings() for method in self.methods
                for seed in (self.seeds + self.more_seeds if seeds is None else seeds) if self.trains(setting, method)]

    def cell_path(self, cell: Cell) -> Path:
        """`<key>/<method>/seed_<s>`: where the cell's checkpoints and result file live under the out_dir and the
        store."""
        return Path(cell_key(self.setting_config(cell.setting))) / cell.method / f"seed_{cell.seed}"

    def run_dir(self, cell: Cell) -> Path:
        """The folder of the cell's run (checkpoints, `final`) on this machine: its cell_path under the out_dir."""
        return Path(self.out_dir) / self.cell_path(cell)

    def cell_config(self, cell: Cell) -> TrainConfig:
        """The cell's training config."""
        data = self.setting_config(cell.setting)
        data.setdefault("model", {})["method"] = cell.method
        if self.start_from:  # retrofitting: each seed starts from its own model of the parent study
            data["model"]["init_from"] = data["model"]["init_from"].format(seed=cell.seed)
        data.setdefault("train", {}).update(seed=cell.seed, out_dir=str(self.run_dir(cell)))
        source = f"study {self.name}, {setting_label(cell.setting) or 'base'}, {self.cell_path(cell)}"
        return TrainConfig.from_dict(data, source=source)

    def start_config(self, seed: int) -> TrainConfig:
        """The training config of the parent study's base-setting cell that `start_from` names."""
        return self.started_from.cell_config(Cell({}, self.start_from, seed))


# settings that change neither the model nor its training, so they do not enter a cell's key
# (nor do the branches a run trains besides its own budget: the run is the same with or without them)
_NOT_IN_KEY = {"train": {"out_dir", "progress", "log_every", "checkpoint_every", "keep_checkpoints", "branch_steps"},
               "logging": "*"}


def _checked(study: Study, path: Path) -> Study:
    """`study.check()`, its error naming the config file."""
    try:
        return study.check()
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def cell_key(config: dict) -> str:
    """A short hash of a training config's settings that differ from the defaults, without its method and seed:
    the same settings give the same key, and a new config field with a default keeps every existing key."""
    source = "a cell's settings ([base.*] and the axes')"
    full = TrainConfig.from_dict(json.loads(json.dumps(config)), source=source).to_dict()
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


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_of(values, kind: type) -> bool:
    return isinstance(values, list) and all(_integer(v) if kind is int else isinstance(v, kind) for v in values)


def _axes(path: Path, data: dict) -> list[Axis]:
    """The config's [axes.*], checked."""
    axes = []
    for name, axis in data.get("axes", {}).items():
        if not {"values"} <= set(axis) <= {"key", "values", "branches", "baseline_only"}:
            raise ValueError(f"{path}: [axes.{name}] needs key and values, or values only (each a table of keys), "
                             f"and may set branches and baseline_only; got {sorted(axis)}")
        values = axis["values"]
        if not isinstance(values, (list, dict)):
            raise ValueError(f"{path}: [axes.{name}] values must be a list (or a table of labelled values), got "
                             f"{values!r}: write values = [{values!r}]")
        if not isinstance(values, dict):
            values = {str(v): v for v in values}
        if not values:
            raise ValueError(f"{path}: [axes.{name}] has no values")
        if "key" not in axis and not all(isinstance(v, dict) and v for v in values.values()):
            raise ValueError(f"{path}: [axes.{name}] has no key, so each value must be a table of "
                             'training-config keys, e.g. {"train.steps" = 800}')
        if "key" not in axis:
            _check_setting_tables(f"{path}: [axes.{name}.values", values)
        branches = axis.get("branches", False)
        steps = axis.get("key") == "train.steps" and all(isinstance(v, int) for v in values.values())
        baseline_only = [str(label) for label in axis.get("baseline_only", [])]
        # fractions of the setting's steps; past 1 only for budgets the baseline alone trains (its curve)
        fractions = axis.get("key") == STEPS_FRACTION and all(
            0 < v <= 1 or (v > 1 and label in baseline_only) for label, v in values.items())
        if (branches and not (steps or fractions)) or (axis.get("key") == STEPS_FRACTION and not fractions):
            raise ValueError(f"{path}: [axes.{name}] branches = true takes key = \"train.steps\" and step counts, "
                             f"or key = \"{STEPS_FRACTION}\" and fractions in (0, 1] of the setting's train.steps "
                             "(past 1 only for a baseline_only budget)")
        shared = [v for label, v in values.items() if label not in baseline_only]
        if set(baseline_only) - set(values) or (baseline_only and not shared):
            raise ValueError(f"{path}: [axes.{name}] baseline_only {baseline_only} must name some of its values "
                             f"{list(values)}, not all: the other methods train the rest")
        if branches and baseline_only and min(values[label] for label in baseline_only) <= max(shared):
            raise ValueError(f"{path}: [axes.{name}] baseline_only {baseline_only} must name budgets of its "
                             "values, each longer than every budget the other methods train")
        axes.append(Axis(name, axis.get("key"), values, branches, baseline_only))
    return axes


def _check_setting_tables(where: str, values: dict) -> None:
    """A keyless axis's tables of "section.key" = value, each key quoted."""
    for label, table in values.items():
        for key, value in table.items():
            if "." not in key and isinstance(value, dict):  # TOML read the key's dots as tables
                dotted = key
                while isinstance(value, dict) and value:
                    dotted, value = f"{dotted}.{next(iter(value))}", next(iter(value.values()))
                raise ValueError(f'{where}.{label}] sets {key} as a table: quote a dotted key, "{dotted}" = ..., or '
                                 "TOML reads its dots as tables")
            if key == STEPS_FRACTION:
                raise ValueError(f'{where}.{label}] sets {STEPS_FRACTION}, which only an axis of its own takes: '
                                 f'key = "{STEPS_FRACTION}" and a fraction per label')


def _datasets(path: Path, data: dict) -> dict:
    """The config's [datasets.*] by path, with prepare's settings (and the source's sha256 where declared)."""
    datasets = {}
    for name, spec in data.get("datasets", {}).items():
        if set(spec) - {"path", "vocab_size", "input", "sha256"} or "path" not in spec:
            raise ValueError(f"{path}: [datasets.{name}] takes path, vocab_size, input (what `depthattn "
                             f"prepare --input` takes; the embedded corpus by default) and sha256, got {sorted(spec)}")
        declared = {"vocab_size": spec.get("vocab_size", 4096), "input": spec.get("input", "embedded")}
        if "sha256" in spec:
            if declared["input"] not in CHECKED_INPUTS:
                raise ValueError(f"{path}: [datasets.{name}] declares a sha256, which only the inputs whose text "
                                 f"prepare checksums have ({', '.join(CHECKED_INPUTS)}), not {declared['input']!r}: "
                                 "remove it")
            if not (isinstance(spec["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", spec["sha256"])):
                raise ValueError(f"{path}: [datasets.{name}] sha256 must be 64 lowercase hex digits (the manifest's "
                                 f"source_files sha256), got {spec['sha256']!r}")
            declared["sha256"] = spec["sha256"]
        datasets[spec["path"]] = declared
    return datasets


def _searched(folder: Path, confirm: dict, results: str) -> Study:
    """The study a confirmation takes its picks from (its [study.confirm] from), reading its results in `results`."""
    if set(confirm) != {"from", "against"}:
        raise ValueError(f"[study.confirm] takes from (a study config with a [study.search]) and against (a "
                         f"method), got {sorted(confirm)}")
    searched = Study.load(folder / confirm["from"], results=results)
    if searched.search is None:
        raise ValueError(f"[study.confirm] from = {confirm['from']!r}: that study has no [study.search]")
    return searched


def _shown(path: Path) -> str:
    """`path` as given, an absolute one relative to the working folder where it lies below it."""
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _with_ancestors(path: Path, children: tuple[Path, ...] = ()) -> dict:
    """The study config `path`, its [datasets], [base] and [slurm] over those of the study it extends, and so on to
    the root of the chain; `children`: the configs that extend it, to name a chain that loops."""
    if path.resolve() in children:
        chain = " -> ".join(str(p) for p in (*children, path))
        raise ValueError(f"{chain}: the studies extend each other in a loop; end the chain at a study without extends")
    data = read_toml(path, "study config", "configs/study/")
    extends = data.get("study", {}).get("extends")
    if not extends:
        return data
    parent = path.parent / extends
    if not parent.is_file():
        raise FileNotFoundError(f"{path}: extends {parent}, which does not exist")
    inherited = _with_ancestors(parent, (*children, path.resolve()))
    return {**data, "datasets": {**inherited.get("datasets", {}), **data.get("datasets", {})},
            "base": _merge(inherited.get("base", {}), data.get("base", {})),
            "slurm": _merge(inherited.get("slurm", {}), data.get("slurm", {}))}


def _merge(base: dict, top: dict) -> dict:
    merged = dict(base)
    for key, value in top.items():
        both_tables = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both_tables else value
    return merged


def set_key(data: dict, key: str, value) -> None:
    parts = key.split(".")
    if len(parts) < 2:
        raise ValueError(f"axis key {key!r} must name a config section and key, e.g. model.overrides.num_hidden_layers")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    both_tables = isinstance(value, dict) and isinstance(data.get(parts[-1]), dict)
    data[parts[-1]] = _merge(data[parts[-1]], value) if both_tables else value  # a table merges, as extends does

