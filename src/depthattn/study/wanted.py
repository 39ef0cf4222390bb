"""Which cells a study still wants: the study's seeds without a result, then more seeds where a difference's interval
still spans zero; with a branched budget axis, the runs that train them. Reading result files only: the reports ask
it too, without the trainer."""

from __future__ import annotations

from .records import Cell
from .spec import Study, setting_label
from .stats import summarize
from .store import CellStore


def runs_of(study: Study, cells: list[Cell]) -> list[Cell]:
    """The runs that train `cells`: with a branched budget axis one run per (other settings, method, seed), named
    by its longest budget's cell, whose run branches off the shorter ones; else the cells themselves."""
    if not study.branch_axis:
        return cells
    return list(dict.fromkeys(Cell(study.run_setting(cell.setting, cell.method), cell.method, cell.seed)
                              for cell in cells))


def pending_cells(study: Study, store: CellStore, seeds: list[int] | None = None,
                  methods: list[str] | None = None) -> list[Cell]:
    """Cells (runs) without a result file in `store` (nor a diverged run), seed-major so early results cover every
    method of every setting. `seeds` and `methods` narrow the study's own (several studies run together may name
    others')."""
    seeds = study.seeds if seeds is None else [seed for seed in seeds if seed in study.seeds + study.more_seeds]
    methods = study.methods if methods is None else [method for method in methods if method in study.methods]
    cells = [Cell(setting, method, seed) for seed in seeds for setting in study.settings() for method in methods
             if study.trains(setting, method)]
    return runs_of(study, [cell for cell in cells if not store.is_settled(study, cell)])


def uncertain_cells(study: Study, store: CellStore) -> list[Cell]:
    """The more_seeds cells of each (setting, method) whose difference to the baseline still spans zero."""
    if not study.more_seeds:
        return []
    table = summarize(study, store.read_results(study))
    wanted = []
    for setting in study.settings():
        summary = table[setting_label(setting)]
        unsure = [r.method for r in summary.rows if r.difference and r.difference.diff_low < 0 < r.difference.diff_high]
        unsure += [m for c in summary.contrasts if c.difference.diff_low < 0 < c.difference.diff_high for m in c.pair]
        for method in dict.fromkeys([study.baseline, *unsure] if unsure else []):
            wanted += [cell for cell in (Cell(setting, method, s) for s in study.more_seeds)
                       if study.trains(setting, method) and not store.is_settled(study, cell)]
    return runs_of(study, wanted)
