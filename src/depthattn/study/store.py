"""Where a study's results live: one small JSON file per cell, `<root>/<key>/<method>/seed_<s>.json` (the cell's path
under its key: `Study.cell_path`), read and written as `CellResult`. Studies that share a cell share its file. A cell
whose run diverged has `seed_<s>.diverged.json` instead: no loss, why it stopped, and the config; it counts as run.

A study says what it trains and reads nothing; whatever reads its results is handed a `CellStore` by its caller
(`CellStore.of(study)`: the one in the study's results folder)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..files import atomic_write_json, read_json_object
from .records import Cell, CellResult

if TYPE_CHECKING:
    from .spec import Study


@dataclass(frozen=True)
class CellStore:
    root: Path  # <results>/cells

    @classmethod
    def of(cls, study: Study) -> CellStore:
        """The store in `study`'s results folder (the config's, or the one `Study.load` was given)."""
        return cls(Path(study.results) / "cells")

    def path(self, cell_path: Path) -> Path:
        return self.root / Path(cell_path).with_suffix(".json")

    def has(self, cell_path: Path) -> bool:
        """Whether the cell has a whole result file (a damaged one counts as none)."""
        path = self.path(cell_path)
        try:
            return path.exists() and bool(CellResult.read(path))
        except ValueError:
            return False

    def read(self, cell_path: Path, setting: Mapping[str, str]) -> CellResult | None:
        """The cell's result, or None when it has none; a damaged result file is named and left out (the cell counts
        as missing: `set_aside_damaged` moves it away before a run trains the cell again)."""
        path = self.path(cell_path)
        if not path.exists():
            return None
        try:
            return CellResult.read(path, setting)
        except ValueError as error:
            print(f"note: {error}; the cell is left out as missing (`depthattn study` sets the file aside and trains "
                  "the cell again)", file=sys.stderr)
            return None

    def write(self, cell_path: Path, result: CellResult) -> None:
        result.write(self.path(cell_path))

    def diverged_path(self, cell_path: Path) -> Path:
        return self.root / Path(cell_path).with_suffix(".diverged.json")

    def write_diverged(self, cell_path: Path, cell: Cell, reason: str, config: dict) -> None:
        """Record that `cell`'s run diverged before it reached its loss: `reason` (the error, naming the step) and
        the run's config. The cell counts as run, so a study does not train it again; delete the file to retry."""
        atomic_write_json(self.diverged_path(cell_path),
                          {"method": cell.method, "seed": cell.seed, "diverged": reason, "config": config})

    def diverged(self, cell_path: Path) -> str | None:
        """Why the cell's run diverged, or None where it did not (or has a result: a finished result wins)."""
        path = self.diverged_path(cell_path)
        if not path.exists() or self.has(cell_path):
            return None
        try:
            return str(read_json_object(path).get("diverged", "diverged"))
        except ValueError as error:  # cut short: the run diverged all the same
            return f"diverged ({error})"

    def settled(self, cell_path: Path) -> bool:
        """Whether the cell needs no run: it has a whole result file or its run diverged."""
        return self.has(cell_path) or self.diverged_path(cell_path).exists()

    def set_aside_damaged(self, cell_paths: Iterable[Path]) -> list[Path]:
        """Move every damaged result file among `cell_paths` to `<name>.damaged`, saying so, so that its cell trains
        again; returns the new paths."""
        moved = []
        for path in map(self.path, cell_paths):
            if not path.exists():
                continue
            try:
                CellResult.read(path)
            except ValueError as error:
                aside = path.with_name(path.name + ".damaged")
                os.replace(path, aside)
                print(f"{error}: moved aside to {aside}; the cell trains again", file=sys.stderr)
                moved.append(aside)
        return moved

    # a study's cells, each where the study says it lies (`Study.cell_path`)

    def result_path(self, study: Study, cell: Cell) -> Path:
        return self.path(study.cell_path(cell))

    def has_result(self, study: Study, cell: Cell) -> bool:
        """Whether the cell has a whole result file (a damaged one counts as none)."""
        return self.has(study.cell_path(cell))

    def read_result(self, study: Study, cell: Cell) -> CellResult | None:
        """The cell's result, or None when it has none (a damaged file is named and left out: `read`)."""
        return self.read(study.cell_path(cell), cell.setting)

    def has_diverged(self, study: Study, cell: Cell) -> bool:
        return self.diverged(study.cell_path(cell)) is not None

    def is_settled(self, study: Study, cell: Cell) -> bool:
        """Whether the cell needs no run (`settled`)."""
        return self.settled(study.cell_path(cell))

    def read_diverged(self, study: Study) -> list[CellResult]:
        """Every diverged cell of `study` as a result of infinite loss (its record holds why), for an analysis that
        ranks runs, where a diverged run is the worst (a learning-rate sweep's tuning); never a loss to average."""
        return [CellResult(cell.method, cell.seed, math.inf, {"diverged": reason}, setting=cell.setting)
                for cell in study.cells() if (reason := self.diverged(study.cell_path(cell))) is not None]

    def read_results(self, study: Study) -> list[CellResult]:
        """The result of every finished cell of `study`."""
        return [result for cell in study.cells() if (result := self.read_result(study, cell)) is not None]

    def set_aside_study(self, study: Study) -> list[Path]:
        """Move every damaged result file of `study` aside, so that its cell trains again (`set_aside_damaged`)."""
        return self.set_aside_damaged(map(study.cell_path, study.cells()))
