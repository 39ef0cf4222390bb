"""The local executor: a study's cells on this machine, `workers` cells at a time, each in one process or, with
`tasks_per_cell` > 1, in that many processes under torch.distributed as torchrun starts them (gloo on CPUs, NCCL on
GPUs)."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from .cell import check_split, run_cell
from .records import Cell, CellResult
from .spec import Study


def _run_distributed(study: Study, cell: Cell, threads: int | None, tasks: int) -> CellResult | None:
    """One cell in `tasks` processes, launched and watched by torch's elastic agent (torchrun's own)."""
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=tasks, run_id=f"cell-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.5,
                          start_method="spawn")
    return elastic_launch(config, run_cell)(study, cell, threads)[0]  # rank 0's result


_stopped = False  # in a worker process: one of its cells was stopped by a signal, so it starts no other


def _cell_in_worker(executor: LocalExecutor, study: Study, cell: Cell) -> CellResult | None:
    """`executor._cell` in a pool worker. A signal sent to the whole process group (Ctrl-C, `kill -- -PGID`, a
    scheduler) stops the worker's running cell at a checkpoint; the pool may already have handed the worker the
    next cell, which must not start then: the study is stopping."""
    global _stopped
    if _stopped:
        return None
    try:
        return executor._cell(study, cell)
    except KeyboardInterrupt:  # train()'s TrainingInterrupted among them
        _stopped = True
        raise


class LocalExecutor:
    """Cells on this machine (implements `study.runner.Executor`)."""

    def __init__(self, workers: int = 1, threads: int | None = None, tasks_per_cell: int = 1):
        if workers < 1 or tasks_per_cell < 1:
            raise ValueError(f"--workers and --tasks-per-cell must be >= 1, got {workers} and {tasks_per_cell}")
        self.workers, self.threads, self.tasks_per_cell = workers, threads, tasks_per_cell

    def describe(self) -> str:
        tasks = f", {self.tasks_per_cell} processes each" if self.tasks_per_cell > 1 else ""
        return f"{self.workers} at a time{tasks}"

    def _cell(self, study: Study, cell: Cell) -> CellResult | None:
        if self.tasks_per_cell > 1:
            return _run_distributed(study, cell, self.threads, self.tasks_per_cell)
        return run_cell(study, cell, threads=self.threads)

    def run(self, study: Study, cells: list[Cell], fn: Callable[[Study, int, int | None], None] | None = None) -> bool:
        """Train `cells`; a failing cell stops the study with its error. `fn(study, seed, threads)` instead runs
        that for each seed in `cells` (a retrofitting study's starting models)."""
        if fn is not None:
            seeds = sorted({cell.seed for cell in cells})
            if self.workers == 1:
                for seed in seeds:
                    fn(study, seed, self.threads)
                return True
            with ProcessPoolExecutor(min(self.workers, len(seeds))) as pool:
                list(pool.map(fn, [study] * len(seeds), seeds, [self.threads] * len(seeds)))
            return True
        check_split(study, cells, self.tasks_per_cell)
        if self.workers == 1:
            for i, cell in enumerate(cells, 1):
                print(f"[{i}/{len(cells)}] {cell.label}", flush=True)
                self._cell(study, cell)
            return True
        with ProcessPoolExecutor(self.workers) as pool, _sigterm_as_interrupt():
            futures = [pool.submit(_cell_in_worker, self, study, cell) for cell in cells]
            try:
                for i, (cell, future) in enumerate(zip(cells, futures), 1):
                    result = future.result()
                    print(f"[{i}/{len(cells)}] {cell.label}: val loss {result.val_loss:.4f} "
                          f"({result.get('seconds', math.nan):.0f} s)", flush=True)
            except BaseException:  # a failed cell, Ctrl-C or SIGTERM: no queued cell starts; running ones, which
                pool.shutdown(wait=True, cancel_futures=True)  # got the signal too, stop at a checkpoint
                raise
        return True


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt in the main thread while the pool runs, as Ctrl-C does, so that the study
    stops (cancelling the queued cells) instead of dying and leaving its workers to go on alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
