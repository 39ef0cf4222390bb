"""What an executor hands a cell's run: its training config, where its checkpoints and result files go, and the
budgets it writes results for, computed from the study before the run starts. A plan pickles, so it travels to a
pool worker or a Slurm job as it is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..train.config import TrainConfig
from .records import Cell, CellResult
from .spec import Study
from .store import CellStore


@dataclass(frozen=True)
class Budget:
    """One result a run writes: its cell, the training config it stands for, and its path in the store."""

    cell: Cell
    config: TrainConfig
    path: Path  # <key>/<method>/seed_<s>


@dataclass(frozen=True)
class CellPlan:
    """One cell's run. With a branched budget axis the cell is the run of its longest budget, and `budgets` holds one
    result per budget the run trains (shortest first), each a cooldown branch of the run; otherwise the cell alone."""

    cell: Cell
    config: TrainConfig  # the run's; its train.out_dir is where its checkpoints go
    path: Path  # <key>/<method>/seed_<s>: under the store and the out_dir
    budgets: tuple[Budget, ...]
    branched: bool
    store: CellStore

    @property
    def label(self) -> str:
        return self.cell.label

    def has_result(self, budget: Budget | None = None) -> bool:
        """Whether the cell (or `budget`) has a whole result file."""
        return self.store.has(budget.path if budget else self.path)

    def settled(self, budget: Budget) -> bool:
        """Whether `budget` needs no training: it has a whole result file or its run diverged."""
        return self.store.settled(budget.path)

    def read_result(self) -> CellResult | None:
        return self.store.read(self.path, self.cell.setting)


@dataclass(frozen=True)
class StartPlan:
    """The model a retrofitting study's cells of `seed` start from: the parent study's cell that `start_from`
    names."""

    seed: int
    config: TrainConfig

    @property
    def label(self) -> str:
        return f"seed {self.seed}"

    def ready(self) -> bool:
        """Whether the model is trained (in this machine's out_dir)."""
        return (Path(self.config.train.out_dir) / "final" / "model.safetensors").exists()


def plan_cell(study: Study, store: CellStore, cell: Cell) -> CellPlan:
    """The plan of `cell`'s run, its results written to and read from `store`."""
    budgets = [Cell(setting, cell.method, cell.seed) for setting in study.budget_settings(cell.setting, cell.method)]
    return CellPlan(cell, study.cell_config(cell), study.cell_path(cell),
                    tuple(Budget(budget, study.cell_config(budget), study.cell_path(budget)) for budget in budgets),
                    study.branch_axis is not None, store)


def plan_start(study: Study, seed: int) -> StartPlan:
    return StartPlan(seed, study.start_config(seed))
