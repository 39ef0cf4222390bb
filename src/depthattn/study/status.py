"""Where a study's cells stand (`depthattn study --status`) and what the cells still to run would cost
(`--dry-run`): printed, one line a cell, then the study's totals."""

from __future__ import annotations

import statistics

from ..files import held_elsewhere
from ..train.checkpoint import checkpoint_step, newest_good_checkpoint
from .pricing import H100_BF16_TFLOPS, gpu_hours, run_flops, tokens_left
from .records import Cell
from .runner import ExecutorOptions
from .slurm import print_status
from .spec import Study
from .store import CellStore
from .wanted import pending_cells, uncertain_cells


def wanted_cells(study: Study, store: CellStore, methods: list[str] | None = None,
                 seeds: list[int] | None = None) -> list[Cell]:
    """The cells a run would train now (`store` holding the finished ones): the study's seeds, then more seeds where
    intervals span zero (unless `methods` or `seeds` narrow it)."""
    cells = pending_cells(study, store, seeds, methods)
    return cells if seeds or methods else cells + uncertain_cells(study, store)


def dry_run(studies: list[Study], store: CellStore, executor: ExecutorOptions, methods: list[str] | None = None,
            seeds: list[int] | None = None, mfu: float = 0.4, peak_tflops: float | None = None) -> None:
    """Print, study by study, the cells a run would train now, each with its parameters, tokens, FLOPs and GPU-hours
    at `mfu` of `peak_tflops` (default an H100's dense bf16 peak), then the study's totals."""
    for study in studies:
        _dry_run(study, store, executor, methods, seeds, mfu, peak_tflops)


def _dry_run(study: Study, store: CellStore, executor: ExecutorOptions, methods: list[str] | None,
             seeds: list[int] | None, mfu: float, peak_tflops: float | None) -> None:
    peak = peak_tflops or H100_BF16_TFLOPS
    cells = wanted_cells(study, store, methods, seeds)
    print(f"study {study.name}: {len(cells)} cells would run, {executor.executor_for(study).describe()}")
    if executor.executor == "slurm":
        settings = executor.slurm_settings(study)
        print("sbatch:", ", ".join(f"{k}={v}" for k, v in settings.submitit_parameters(study.name).items() if v))
    total_flops = total_hours = separate = 0.0
    for cell in cells:
        cost = run_flops(study, cell.setting, cell.method)
        hours = gpu_hours(cost["flops"], mfu, peak)
        total_flops, total_hours = total_flops + cost["flops"], total_hours + hours
        separate += cost["separate_flops"]
        print(f"  {cell.label}: {cost['params'] / 1e6:,.1f}M params, "
              f"{cost['tokens'] / 1e9:,.3f}B tokens, {cost['flops']:.2e} FLOPs, {hours:,.2f} GPU-h")
    print(f"study {study.name}: {total_flops:.2e} FLOPs, {total_hours:,.2f} GPU-hours at {mfu:.0%} MFU of "
          f"{peak:g} TFLOP/s")
    if study.branch_axis and total_flops:
        print(f"study {study.name}: every budget as a run of its own would cost {separate:.2e} FLOPs, "
              f"{gpu_hours(separate, mfu, peak):,.2f} GPU-hours: {separate / total_flops:.2f} x "
              "the branched runs")


def status(studies: list[Study], store: CellStore, executor: ExecutorOptions, methods: list[str] | None = None,
           seeds: list[int] | None = None) -> None:
    """Print, study by study, every cell that is finished or would run now (locally: the step it resumes at, and
    "running" where another process holds its run folder; with Slurm: its job's state and log), then the counts and,
    locally, about how long the rest trains."""
    for study in studies:
        _status(study, store, executor, methods, seeds)


def _status(study: Study, store: CellStore, executor: ExecutorOptions, methods: list[str] | None,
            seeds: list[int] | None) -> None:
    cells = [Cell(setting, method, seed) for seed in study.seeds + study.more_seeds for setting in study.settings()
             for method in study.methods]
    wanted = {store.result_path(study, cell) for cell in wanted_cells(study, store, methods, seeds)}
    if executor.executor == "slurm":  # the cells run or to train (not a more_seeds cell no rule wants)
        trained = [cell for cell in cells if store.result_path(study, cell) in wanted or store.is_settled(study, cell)]
        print_status(study, store, executor.slurm_executor(study), trained)
        return
    diverged = {cell: why for cell in cells if (why := store.diverged(study.cell_path(cell))) is not None}
    for cell, why in diverged.items():
        print(f"{'diverged':>13}  {study.cell_path(cell)} ({why})")
    finished = {cell for cell in cells if store.has_result(study, cell)}  # a damaged result file counts as none
    resumes = {}  # cell to run -> the step its run resumes at
    running = 0
    for cell in cells:
        if cell in finished or store.result_path(study, cell) in wanted:
            state = "finished"
            if cell not in finished:
                resumes[cell] = _resumes_at(study, cell)
                state = "running" if held_elsewhere(study.run_dir(cell)) else "to run"
                running += state == "running"
            print(f"{state:>13}  {study.cell_path(cell)}" + (
                f" ({'checkpoint at' if state == 'running' else 'resumes at'} step {resumes[cell]:,} of "
                f"{study.cell_config(cell).train.steps:,})" if resumes.get(cell) else ""))
    print(f"study {study.name}: {len(finished)} finished, " + (f"{len(diverged)} diverged, " if diverged else "")
          + (f"{running} running, " if running else "") + f"{len(wanted) - running} to run"
          + _time_left(study, store, resumes))


def _resumes_at(study: Study, cell: Cell) -> int:
    """The step a cell's run resumes at on this machine: its newest whole checkpoint's, 0 without one."""
    checkpoint = newest_good_checkpoint(study.run_dir(cell))
    return 0 if checkpoint is None else checkpoint_step(checkpoint)


def _time_left(study: Study, store: CellStore, resumes: dict[Cell, int]) -> str:
    """'; about N hours of training left ...' from the training tokens the cells to run have left and each method's
    median speed (tokens per second) in its cells that finished here; '' before any has."""
    speeds: dict[str, list[float]] = {}
    for result in store.read_results(study):
        if (speed := result.record.get("tokens_per_s")) and speed > 0:  # not in files of old releases
            speeds.setdefault(result.method, []).append(speed)
    timed = [cell for cell in resumes if cell.method in speeds]
    if not timed:
        return ""
    seconds = sum(tokens_left(study, store, cell, resumes[cell]) / statistics.median(speeds[cell.method])
                  for cell in timed)
    untimed = sorted({cell.method for cell in resumes} - set(speeds))
    return (f"; about {duration(seconds)} of training left for one worker (--workers N divides it), at the "
            "median tokens per second of each method's finished cells, evaluations not counted"
            + (f"; {', '.join(untimed)} not counted: no finished cell to time" if untimed else ""))


def duration(seconds: float) -> str:
    """'1.5 hours' from an hour on, '12 minutes' under one, 'a minute' under a minute and a half."""
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} hours"
    minutes = round(seconds / 60)
    return "a minute" if minutes <= 1 else f"{minutes} minutes"
