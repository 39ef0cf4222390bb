"""Where a study's results live: one small JSON file per cell, `<root>/<key>/<method>/seed_<s>.json` (the cell's path
under its key: `Study.cell_path`), read and written as `CellResult`. Studies that share a cell share its file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .records import CellResult


@dataclass(frozen=True)
class CellStore:
    root: Path  # <results>/cells

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
