"""Running a study: which cells are still wanted (the study's seeds, then more seeds where an interval spans zero),
sent to an executor in rounds; a finished cell is never rerun."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .cell import ensure_dataset, train_start
from .local import LocalExecutor
from .records import Cell
from .spec import Study, setting_label
from .stats import summarize


@runtime_checkable
class Executor(Protocol):
    """Where a study's cells train: local processes (study/local.py) or a Slurm job array (study/slurm.py). Either
    trains a cell through `run_cell`, so a cell is the same wherever it trained."""

    def describe(self) -> str:
        """How the cells run, for the study's progress line ("2 at a time")."""
        ...

    def run(self, study: Study, cells: list[Cell], fn: Callable[[Study, int, int | None], None] | None = None) -> bool:
        """Train `cells`, having checked once that each cell's batch splits over its processes (`check_split`);
        True when every cell is finished, False when some are still out (a detached Slurm submission) or failed.
        `fn(study, seed, threads)` instead trains something per seed of `cells` (a retrofitting study's starting
        models, `train_start`)."""
        ...


def runs_of(study: Study, cells: list[Cell]) -> list[Cell]:
    """The runs that train `cells`: with a branched budget axis one run per (other settings, method, seed), named
    by its longest budget's cell, whose run branches off the shorter ones; else the cells themselves."""
    if not study.branch_axis:
        return cells
    return list(dict.fromkeys(Cell(study.run_setting(cell.setting, cell.method), cell.method, cell.seed)
                              for cell in cells))


def pending_cells(study: Study, seeds: list[int] | None = None, methods: list[str] | None = None) -> list[Cell]:
    """Cells (runs) without a result file, seed-major so early results cover every method of every setting."""
    seeds = seeds or study.seeds
    methods = methods or study.methods
    cells = [Cell(setting, method, seed) for seed in seeds for setting in study.settings() for method in methods
             if study.trains(setting, method)]
    return runs_of(study, [cell for cell in cells if not study.has_result(cell)])


def uncertain_cells(study: Study) -> list[Cell]:
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
            wanted += [cell for cell in (Cell(setting, method, s) for s in study.more_seeds)
                       if study.trains(setting, method) and not study.has_result(cell)]
    return runs_of(study, wanted)


def run_study(study: Study, executor: Executor | None = None, methods=None, seeds=None) -> bool:
    """Train every cell without a result through `executor` (default: local, one at a time): the cells of the
    study's seeds, then the more-seed cells where an interval spans zero. False when cells are still out (a
    detached Slurm submission), so that round two waits for round one."""
    executor = executor or LocalExecutor()
    study.set_aside_damaged()
    for path in {study.cell_config(Cell(s, study.methods[0], study.seeds[0])).data.path for s in study.settings()}:
        ensure_dataset(study, path)
    if study.start_from:  # the starting models first: cells of a seed share theirs
        starts = [cell for cell in pending_cells(study, seeds, methods) if not study.start_ready(cell.seed)]
        if starts and not executor.run(study, starts, fn=train_start):
            return False
    rounds = [lambda: pending_cells(study, seeds, methods)]
    if seeds is None and methods is None:
        rounds.append(lambda: uncertain_cells(study))
    for cells_of in rounds:
        cells = cells_of()
        if not cells:
            continue
        print(f"study {study.name}: {len(cells)} cells to run, {executor.describe()}", flush=True)
        if executor.run(study, cells) is False:
            return False
    return True
