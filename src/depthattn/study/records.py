"""A study's records: a cell (one method with one seed in one setting) and its result file, which is read and
written here only."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..files import atomic_write_json, read_json_object


def setting_label(setting: Mapping[str, str]) -> str:
    return ",".join(f"{name}={label}" for name, label in setting.items())


class Setting(dict):
    """A setting, {axis name: label}, that cannot change, so that a cell can be a dict key or a set member.
    `{**setting, name: label}` makes another."""

    def __hash__(self):  # type: ignore[override]  # dict is unhashable; a setting that cannot change is hashable
        return hash(frozenset(self.items()))

    def _frozen(self, *args, **kwargs):
        raise TypeError("a cell's setting cannot change; make another: {**setting, name: label}")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen

    def __reduce__(self):  # pickling (worker processes, Slurm jobs) builds it whole, not key by key
        return Setting, (dict(self),)


@dataclass(frozen=True)
class Cell:
    """One cell of a study: `method` trained with `seed` in `setting`. Cells with the same setting and seed share
    the data order and the backbone's initial weights. Where its checkpoints and result file live is the study's
    to say (`Study.cell_path`; `CellStore.result_path`)."""

    setting: Mapping[str, str]
    method: str
    seed: int

    def __post_init__(self):
        if not isinstance(self.setting, Setting):
            object.__setattr__(self, "setting", Setting(self.setting))

    @property
    def label(self) -> str:
        return f"{setting_label(self.setting) or 'default'} {self.method} seed {self.seed}"


@dataclass(frozen=True)
class CellResult:
    """A cell's result file: which cell it is and its loss, which every result holds (checked when the file is
    read), and the whole file as `record` (scores, the eval-subset curve, parameter counts, throughput, the config
    and run metadata: study/cell.py writes them, the reports read them through the properties below). `source` is
    the file it was read from; `setting` the cell's, which the study that read it knows (the file holds the config,
    not the axis labels)."""

    method: str
    seed: int
    val_loss: float
    record: dict = field(default_factory=dict, repr=False, compare=False)
    source: Path | None = field(default=None, repr=False, compare=False)
    setting: Mapping[str, str] = field(default_factory=Setting, compare=False)

    REQUIRED: ClassVar[dict[str, type]] = {"method": str, "seed": int, "val_loss": float}

    def __post_init__(self):
        if not isinstance(self.setting, Setting):
            object.__setattr__(self, "setting", Setting(self.setting))

    @classmethod
    def read(cls, path: Path, setting: Mapping[str, str] | None = None) -> CellResult:
        """The result file at `path` (of the cell in `setting`), checked: a JSON object with every key of REQUIRED,
        of its type, the loss finite. A damaged file (cut short by a full disk or an interrupted copy, a bad merge,
        another program's JSON) raises ValueError naming it and what is wrong."""
        data = read_json_object(path)
        wrong = [key for key, kind in cls.REQUIRED.items() if isinstance(data.get(key), bool)
                 or not isinstance(data.get(key), (int, float) if kind is float else kind)]
        if wrong:
            raise ValueError(f"{path} is not a cell result: {', '.join(wrong)} missing or of the wrong type")
        if not math.isfinite(data["val_loss"]):
            raise ValueError(f"{path} is not a cell result: val_loss is {data['val_loss']}")
        return cls(data["method"], data["seed"], data["val_loss"], data, Path(path), setting or Setting())

    def write(self, path: Path) -> None:
        """Write the result file, atomically: a crash leaves the old file or none, never half of one."""
        atomic_write_json(path, self.to_record())

    def to_record(self) -> dict:
        """The result file's JSON object: method, seed and val_loss first, then the rest of `record`."""
        return {"method": self.method, "seed": self.seed, "val_loss": self.val_loss,
                **{key: value for key, value in self.record.items() if key not in self.REQUIRED}}

    @property
    def cell(self) -> Cell:
        return Cell(self.setting, self.method, self.seed)

    def metric(self, name: str):
        """The field `name` of the result file (a search's metric), with an error naming the file when it has
        none."""
        if name in self.REQUIRED:
            return getattr(self, name)
        if name not in self.record:
            raise ValueError(f"{self.source or 'the cell result'} has no {name!r} (it has "
                             f"{', '.join(self.to_record())})")
        return self.record[name]

    @property
    def val_bits_per_byte(self) -> float:
        return self.metric("val_bits_per_byte")

    @property
    def train_tokens(self) -> int:
        return self.metric("train_tokens")

    @property
    def params_total(self) -> int:
        return self.metric("params_total")

    @property
    def params_extra(self) -> int:
        """Parameters the method adds to the vanilla model of the same shape."""
        return self.metric("params_extra_over_vanilla")

    @property
    def tokens_per_s(self) -> float:
        """Median training throughput of the run."""
        return self.metric("tokens_per_s")

    @property
    def seconds(self) -> float:
        """Wall-clock seconds the cell took (NaN in files written before it was recorded)."""
        return self.record.get("seconds", math.nan)

    @property
    def data_epochs(self) -> float | None:
        """Passes over the training data (None in files written before it was recorded)."""
        return self.record.get("data_epochs")

    @property
    def curve(self) -> dict[int, float]:
        """The eval-subset loss along training, {tokens: loss}, stored as [tokens, loss] pairs."""
        return dict(map(tuple, self.metric("curve")))
