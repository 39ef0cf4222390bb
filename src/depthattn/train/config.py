"""Training configuration: typed sections read from a TOML file, overridable as `--section.key value`."""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import DepthAttentionConfig, check_choice, did_you_mean, method_fields
from ..presets import METHOD_PRESETS, method_settings

MODEL_PRESETS = {
    # CPU sizes
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2),
    "bench": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=12, num_attention_heads=8,
                  num_key_value_heads=2),
    # the paper's shapes: vocab 50304, untied embeddings, head dim 64
    "360m": dict(hidden_size=960, intermediate_size=2540, num_hidden_layers=24, num_attention_heads=15,
                 num_key_value_heads=15),
    "500m": dict(hidden_size=1152, intermediate_size=3072, num_hidden_layers=24, num_attention_heads=18,
                 num_key_value_heads=18),
    "710m": dict(hidden_size=1280, intermediate_size=3072, num_hidden_layers=32, num_attention_heads=20,
                 num_key_value_heads=20),
    "1.5b": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=48, num_attention_heads=24,
                 num_key_value_heads=6),
    "3b": dict(hidden_size=2048, intermediate_size=6912, num_hidden_layers=48, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64),
}


@dataclass
class ModelSection:
    preset: str = "tiny"
    method: str = DepthAttentionConfig.cross_layer  # a preset of depthattn.presets: a method or a variant of one
    num_loops: int = 1
    max_position_embeddings: int = 4096
    overrides: dict = field(default_factory=dict)  # any other DepthAttentionConfig field
    # retrofitting (docs/method.md#retrofitting): a saved model folder (final/ or checkpoints/step_*) of the same
    # backbone whose tensors start this run; the method's own parameters keep their initialisation
    init_from: str = ""

    def check(self):
        check_choice("model.preset", self.preset, MODEL_PRESETS)
        check_choice("model.method", self.method, METHOD_PRESETS)
        _positive("model.num_loops", self.num_loops)
        self._check_overrides()

    def _check_overrides(self):
        """Each key a field of the model config: DepthAttentionConfig would keep any other as an unused attribute."""
        own = typing.get_type_hints(ModelSection)  # num_loops, max_position_embeddings: the error names model.NAME
        fields = [name for name in (*DepthAttentionConfig.__annotations__, *method_fields())
                  if name not in own and name not in SET_BY_TRAINING]
        for key in self.overrides:
            if key in SET_BY_TRAINING:
                raise ValueError(f"model.overrides.{key} is set by {SET_BY_TRAINING[key]}; drop the override")
            if key not in fields:
                raise ValueError(_unknown(f"model.overrides: unknown key {key!r}", key, fields))


# model config fields that training sets from elsewhere
SET_BY_TRAINING = {"cross_layer": "model.method", "eos_token_id": "the tokenizer of data.path"}


@dataclass
class DataSection:
    path: str = "runs/data/embedded"  # a folder written by `depthattn prepare`
    seq_len: int = 256

    def check(self):
        _positive("data.seq_len", self.seq_len)


@dataclass
class OptimSection:
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    schedule: str = "cosine"  # or "wsd": warmup, stable, decay (train/optim.py)
    decay_fraction: float = 0.2  # wsd: the decay's length as a fraction of the run
    decay_shape: str = "1-sqrt"  # wsd: "linear", "1-sqrt" or "cosine"

    def check(self):
        _positive("optim.lr", self.lr)
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"optim.{name} must lie in [0, 1), got {getattr(self, name)}")
        _positive("optim.eps", self.eps)
        if not (0 <= self.weight_decay < math.inf and self.warmup_steps >= 0 and 0 <= self.grad_clip < math.inf):
            raise ValueError("optim.weight_decay, optim.warmup_steps and optim.grad_clip must be finite and >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")
        check_choice("optim.schedule", self.schedule, ("cosine", "wsd"))
        check_choice("optim.decay_shape", self.decay_shape, ("linear", "1-sqrt", "cosine"))
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"optim.decay_fraction must lie in (0, 1], got {self.decay_fraction}")

    def decay_steps(self, total_steps: int) -> int:
        """WSD: the length of the decay that ends a run (or a cooldown branch) of `total_steps`."""
        return round(self.decay_fraction * total_steps)

    def decay_start(self, total_steps: int) -> int:
        """WSD: how many steps a run of `total_steps` takes, warmup included, before its decay."""
        return total_steps - self.decay_steps(total_steps)


@dataclass
class TrainSection:
    out_dir: str = "runs/train"
    steps: int = 200
    # sequences per process and micro-step: under torchrun a step takes batch_size * grad_accum * world size (a
    # study instead splits its batch_size over a cell's --tasks-per-cell processes: study/cell.py)
    batch_size: int = 8
    grad_accum: int = 1
    seed: int = 0
    dtype: str = "auto"  # auto: bf16 autocast on GPUs that support it, else float32
    compile: bool = False
    activation_checkpointing: bool = False  # recompute each layer in the backward: less memory, ~1/3 more compute
    parallel: str = "ddp"  # with torchrun: ddp or fsdp
    eval_every: int = 50
    eval_batches: int = 8
    log_every: int = 10  # without a bar: a log line every N steps (and at each evaluation)
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    progress: bool = True  # a bar where stderr is a terminal (log lines elsewhere: a file, a pipe)
    # with optim.schedule = "wsd": shorter budgets whose decay branches off this run's stable phase, each equal to a
    # run of that many steps (train/branches.py); train.steps is the longest budget, the run itself
    branch_steps: list = field(default_factory=list)

    def check(self):
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "log_every",
                     "checkpoint_every", "keep_checkpoints"):
            _positive(f"train.{name}", getattr(self, name))
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"train.seed must be an integer from 0 to 2**63 - 1 (torch's seed range), "
                             f"got {self.seed!r}")
        check_choice("train.dtype", self.dtype, ("auto", "float32", "bfloat16"))
        check_choice("train.parallel", self.parallel, ("ddp", "fsdp"))
        if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in self.branch_steps):
            raise ValueError(f"train.branch_steps must be a list of step counts > 0, got {self.branch_steps}")
        if any(b > self.steps for b in self.branch_steps):
            raise ValueError(f"train.branch_steps {self.branch_steps} must not exceed train.steps ({self.steps}), "
                             "the run they branch off")


@dataclass
class LoggingSection:
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "depthattn"


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)
    logging: LoggingSection = field(default_factory=LoggingSection)

    def check(self) -> TrainConfig:
        for section in dataclasses.fields(self):
            check = getattr(getattr(self, section.name), "check", None)
            if check:
                check()
        self._check_schedule()
        return self

    def _check_schedule(self):
        """Every run, and every branch, keeps its warmup before its decay."""
        o, t = self.optim, self.train
        if o.schedule != "wsd":
            if t.branch_steps:
                raise ValueError('train.branch_steps needs optim.schedule = "wsd" (a cosine run has no stable phase '
                                 "to branch off)")
            return
        for budget in sorted({*t.branch_steps, t.steps}):
            start = o.decay_start(budget)
            if budget != t.steps and start < 1:
                raise ValueError(f"the branch of {budget} steps would decay from its first step: lower "
                                 "optim.decay_fraction or drop that branch")
            if o.warmup_steps > start:
                raise ValueError(f"a WSD run of {budget} steps decays from step {start}, before its "
                                 f"{o.warmup_steps} warmup steps end: lower optim.warmup_steps or optim.decay_fraction"
                                 + (", or drop the shortest branch" if budget != t.steps else ", or train longer"))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> TrainConfig:
        sections = {f.name: f for f in dataclasses.fields(cls)}
        built = {}
        for name, values in data.items():
            if name not in sections:
                raise ValueError(_unknown(f"{source}: unknown section [{name}]", name, sections))
            if not isinstance(values, dict):
                raise ValueError(f"{source}: [{name}] must be a table of keys, got {values!r}")
            section_class = sections[name].default_factory
            built[name] = _build_section(section_class, values, f"{source}: [{name}]")
        return cls(**built).check()

    @classmethod
    def load(cls, path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
        data = read_toml(config_path(path), "training config", "configs/") if path is not None else {}
        for key, value in _pairs(overrides):
            _apply_override(cls, data, key, value)
        return cls.from_dict(data, source=str(path or "config"))


SHIPPED_CONFIGS = Path(__file__).parent.parent / "configs"  # the checkout's configs/, installed with the package


def config_path(path: str | Path) -> Path:
    """`path`; where it is absent and reads `configs/...`, the copy installed with the package, so the documented
    commands also work from a pip install, which has no checkout."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and path.parts[:1] == ("configs",):
        shipped = SHIPPED_CONFIGS.joinpath(*path.parts[1:])
        if shipped.is_file():
            return shipped
    return path


def read_toml(path: str | Path, kind: str, examples: str) -> dict:
    """The tables of a TOML file, with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"{kind} {path} {problem}; see {examples} for examples")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text, so not a TOML file; see {examples} for examples") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path} is not valid TOML: {error}") from None


def _build_section(section_class, values: dict, where: str):
    hints = typing.get_type_hints(section_class)
    for key, value in values.items():
        if key not in hints:
            raise ValueError(_unknown(f"{where}: unknown key {key!r}", key, hints))
        expected = hints[key]
        ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            values[key], ok = float(value), True
        if not ok:
            raise ValueError(f"{where}: {key} must be of type {expected.__name__}, got {value!r}")
    return section_class(**values)


def _pairs(overrides) -> list[tuple[str, str]]:
    """`["--optim.lr", "3e-4", "--train.steps=10"]` -> [("optim.lr", "3e-4"), ("train.steps", "10")]."""
    pairs, items = [], list(overrides)
    while items:
        item = items.pop(0)
        if not item.startswith("--") or "." not in item:
            raise ValueError(f"override {item!r} must look like --section.key value (e.g. --optim.lr 3e-4)")
        if "=" in item:
            key, value = item[2:].split("=", 1)
        elif items and not (items[0].startswith("--") and "." in items[0]):  # not the next override
            key, value = item[2:], items.pop(0)
        else:
            raise ValueError(f"override {item} has no value; give one after it (e.g. --optim.lr 3e-4)")
        pairs.append((key, value))
    return pairs


def _apply_override(cls, data: dict, key: str, text: str):
    section_name, _, name = key.partition(".")
    sections = {f.name: f.default_factory for f in dataclasses.fields(cls)}
    if section_name not in sections:
        raise ValueError(_unknown(f"override --{key}: unknown section {section_name!r}", section_name, sections))
    hints = typing.get_type_hints(sections[section_name])
    section = data.setdefault(section_name, {})
    if not isinstance(section, dict):
        raise ValueError(f"[{section_name}] must be a table of keys, got {section!r}; e.g. [{section_name}] then one "
                         "key = value per line")
    if section_name == "model" and name.startswith("overrides."):  # --model.overrides.depth_stride 3
        section.setdefault("overrides", {})[name.split(".", 1)[1]] = parse_literal(text)
        return
    if name not in hints:
        raise ValueError(_unknown(f"override --{key}: unknown key {name!r}", name, hints))
    expected = hints[name]
    try:
        if expected is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            section[name] = text.lower() in ("true", "1")
        elif expected in (dict, list):  # --train.branch_steps "[200, 800]"
            section[name] = tomllib.loads(f"x = {text}")["x"]
        else:
            section[name] = expected(text)
    except ValueError:
        raise ValueError(f"override --{key}: {text!r} is not a valid {expected.__name__}") from None


def parse_literal(text: str):
    """A command-line value read as a TOML value (2, 0.5, true, "a"), or the text itself where it is none."""
    try:
        return tomllib.loads(f"x = {text}")["x"]
    except tomllib.TOMLDecodeError:
        return text


def _unknown(message: str, key: str, known) -> str:
    elsewhere = [f"{section.name}.{key}" for section in dataclasses.fields(TrainConfig)
                 if key in typing.get_type_hints(section.default_factory)]
    if elsewhere:
        return message + f" (it is {' and '.join(map(repr, elsewhere))}: --{elsewhere[0]})"
    return message + (did_you_mean(key, known) or f"; known: {', '.join(known)}")


def config_keys() -> list[tuple[str, str, object]]:
    """Every key of a training config as (section.key, type, default), from the config classes."""
    keys = []
    for section in dataclasses.fields(TrainConfig):
        factory = section.default_factory
        if not callable(factory):
            raise TypeError(f"TrainConfig.{section.name} needs a default_factory (its section's class)")
        defaults = factory()
        for name, hint in typing.get_type_hints(factory).items():
            keys.append((f"{section.name}.{name}", hint.__name__, getattr(defaults, name)))
    return keys


def _positive(name: str, value):
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be > 0 and finite, got {value}")


def build_model_config(cfg: TrainConfig, vocab_size: int, eos_id: int | None) -> DepthAttentionConfig:
    settings = {**MODEL_PRESETS[cfg.model.preset], **cfg.model.overrides}
    # strides are fractions of the depth actually built, so the method reads the overridden layer count
    settings = {**settings, **method_settings(cfg.model.method, settings["num_hidden_layers"], cfg.model.num_loops),
                **cfg.model.overrides}
    settings.setdefault("vocab_size", vocab_size)
    if settings["vocab_size"] < vocab_size:
        raise ValueError(f"model.overrides.vocab_size={settings['vocab_size']} is smaller than the tokenizer's "
                         f"{vocab_size} ids; drop the override or raise it")
    if cfg.data.seq_len > cfg.model.max_position_embeddings:
        raise ValueError(f"data.seq_len ({cfg.data.seq_len}) exceeds model.max_position_embeddings "
                         f"({cfg.model.max_position_embeddings})")
    return DepthAttentionConfig(max_position_embeddings=cfg.model.max_position_embeddings, eos_token_id=eos_id,
                                **settings)
