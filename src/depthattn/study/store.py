"""Where a study's results live: one small JSON file per cell, `<root>/<key>/<method>/seed_<s>.json` (the cell's path
under its key: `Study.cell_path`), read and written as `CellResult`. Studies that share a cell share its file.

A study says what it trains and reads nothing; whatever reads its results is handed a `CellStore` by its caller
(`CellStore.of(study)`: the one in the study's results folder)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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

    def read_results(self, study: Study) -> list[CellResult]:
        """The result of every finished cell of `study`."""
        return [result for cell in study.cells() if (result := self.read_result(study, cell)) is not None]

    def set_aside_study(self, study: Study) -> list[Path]:
        """Move every damaged result file of `study` aside, so that its cell trains again (`set_aside_damaged`)."""
        return self.set_aside_damaged(map(study.cell_path, study.cells()))
