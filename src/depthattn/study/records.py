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

    def __hash__(self):
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
    to say (`Study.cell_path`, `Study.result_path`)."""

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
    and run metadata: study/cell.py writes them, the reports read them). `source` is the file it was read from."""

    method: str
    seed: int
    val_loss: float
    record: dict = field(default_factory=dict, repr=False, compare=False)
    source: Path | None = field(default=None, repr=False, compare=False)

    REQUIRED: ClassVar[dict[str, type]] = {"method": str, "seed": int, "val_loss": float}

    @classmethod
    def read(cls, path: Path) -> CellResult:
        """The result file at `path`, checked: a JSON object with every key of REQUIRED, of its type, the loss
        finite. A damaged file (cut short by a full disk or an interrupted copy, a bad merge, another program's
        JSON) raises ValueError naming it and what is wrong."""
        data = read_json_object(path)
        wrong = [key for key, kind in cls.REQUIRED.items() if isinstance(data.get(key), bool)
                 or not isinstance(data.get(key), (int, float) if kind is float else kind)]
        if wrong:
            raise ValueError(f"{path} is not a cell result: {', '.join(wrong)} missing or of the wrong type")
        if not math.isfinite(data["val_loss"]):
            raise ValueError(f"{path} is not a cell result: val_loss is {data['val_loss']}")
        return cls(data["method"], data["seed"], data["val_loss"], data, Path(path))

    def write(self, path: Path) -> None:
        """Write the result file, atomically: a crash leaves the old file or none, never half of one."""
        atomic_write_json(path, self.to_record())

    def to_record(self) -> dict:
        """The result file's JSON object: method, seed and val_loss first, then the rest of `record`."""
        return {"method": self.method, "seed": self.seed, "val_loss": self.val_loss,
                **{key: value for key, value in self.record.items() if key not in self.REQUIRED}}

    def get(self, key: str, default=None):
        return self.to_record().get(key, default)

    def metric(self, name: str) -> float:
        """The value of `name` (a search's metric), with an error naming the file when it has none."""
        record = self.to_record()
        if name not in record:
            raise ValueError(f"{self.source or 'the cell result'} has no {name!r} (it has {', '.join(record)})")
        return record[name]

    def row(self, setting: Mapping[str, str]) -> dict:
        """The result as a row of the study's tables (study/stats.py, study/report.py): every field and the
        setting."""
        return {**self.to_record(), "setting": setting}
