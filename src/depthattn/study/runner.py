"""Running a study: the cells it still wants (study/wanted.py) sent to an executor in rounds, the study's seeds, then
more seeds where an interval spans zero; a finished cell is never rerun."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .cell import ensure_dataset, train_start
from .local import LocalExecutor
from .plan import CellPlan, StartPlan, plan_cell, plan_start
from .slurm import SlurmExecutor, SlurmSettings
from .spec import Study
from .store import CellStore
from .wanted import pending_cells, uncertain_cells


@runtime_checkable
class Executor(Protocol):
    """Where a study's cells train: local processes (study/local.py) or a Slurm job array (study/slurm.py). Either
    trains a cell through `run_cell`, so a cell is the same wherever it trained."""

    def describe(self) -> str:
        """How the cells run, for the study's progress line ("2 at a time")."""
        ...

    def run(self, name: str, plans: Sequence[CellPlan | StartPlan],
            fn: Callable[[StartPlan, int | None], None] | None = None) -> bool:
        """Train the cells of study `name` that `plans` plan (`plan.plan_cell`), having checked once that each cell's
        batch splits over its processes (`check_split`); True when every cell is finished, False when some are
        still out (a detached Slurm submission) or failed. `fn(plan, threads)` instead trains something per plan (a
        retrofitting study's starting models: `train_start` of `plan.plan_start`)."""
        ...


@dataclass(frozen=True)
class ExecutorOptions:
    """Where `depthattn study` trains cells, as its flags say: local processes or a Slurm job array."""

    executor: str = "local"  # or "slurm"
    workers: int = 1  # local: cells at once
    threads: int | None = None  # local: torch threads per process
    tasks_per_cell: int = 1  # local: processes per cell
    slurm: tuple[str, ...] = ()  # KEY=VALUE overrides of the config's [slurm] table
    detach: bool = False  # slurm: submit and return
    poll: float = 30.0  # slurm: seconds between queue checks

    def slurm_settings(self, study: Study) -> SlurmSettings:
        return SlurmSettings.from_table(study.slurm, list(self.slurm))

    def executor_for(self, study: Study) -> Executor:
        if self.executor == "local":
            return LocalExecutor(self.workers, self.threads, self.tasks_per_cell)
        return self.slurm_executor(study)

    def slurm_executor(self, study: Study) -> SlurmExecutor:
        return SlurmExecutor(self.slurm_settings(study), study.out_dir, self.poll, wait=not self.detach)


def run_study(study: Study, store: CellStore, executor: Executor | None = None, methods=None, seeds=None) -> bool:
    """Train every cell without a result in `store` through `executor` (default: local, one at a time): the cells of the
    study's seeds, then the more-seed cells where an interval spans zero. False when cells are still out (a
    detached Slurm submission), so that round two waits for round one."""
    executor = executor or LocalExecutor()
    store.set_aside_study(study)
    if study.start_from:  # the starting models first: cells of a seed share theirs
        needed = sorted({cell.seed for cell in pending_cells(study, store, seeds, methods)})
        starts = [start for start in (plan_start(study, seed) for seed in needed) if not start.ready()]
        for path in {start.config.data.path for start in starts}:
            ensure_dataset(study, path)
        if starts and not executor.run(study.name, starts, fn=train_start):
            return False
    rounds = [lambda: pending_cells(study, store, seeds, methods)]
    if seeds is None and methods is None:
        rounds.append(lambda: uncertain_cells(study, store))
    for cells_of in rounds:
        cells = cells_of()
        if not cells:
            continue
        for path in {study.cell_config(cell).data.path for cell in cells}:  # a finished study prepares nothing
            ensure_dataset(study, path)
        print(f"study {study.name}: {len(cells)} cells to run, {executor.describe()}", flush=True)
        if executor.run(study.name, [plan_cell(study, store, cell) for cell in cells]) is False:
            return False
    return True
