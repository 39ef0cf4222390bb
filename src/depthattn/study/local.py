"""The local executor: a study's cells on this machine, `workers` cells at a time, each in one process or, with
`tasks_per_cell` > 1, in that many processes under torch.distributed as torchrun starts them (gloo on CPUs, NCCL on
GPUs). Several workers are spawned processes, which import the script that runs the study as multiprocessing's
spawn does: a script of your own that runs one keeps that under `if __name__ == "__main__":`."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from ..files import FolderHeld, folder_held
from ..train import TrainingInterrupted
from ..train.interrupt import SIGNALS, SignalHandlers, signal_name
from . import cell as cell_module
from .cell import check_split, run_cell, skipped_note
from .plan import CellPlan, StartPlan
from .records import CellResult


def _run_distributed(plan: CellPlan, threads: int | None, tasks: int) -> CellResult | None:
    """One cell in `tasks` processes, launched and watched by torch's elastic agent (torchrun's own). The agent's
    folder of each launch (a worker's error file, should it fail) goes with the cell's run, not into /tmp. A run folder
    another process holds is found here, before the launch: rank 0's FolderHeld would reach the study as the agent's
    ChildFailedError, a failed cell, not a skipped one."""
    with folder_held(plan.config.train.out_dir, "--train.out_dir"):
        pass
    logs = DefaultLogsSpecs(log_dir=str(Path(plan.config.train.out_dir) / "launches"))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=tasks, run_id=f"cell-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.5,
                          start_method="spawn", logs_specs=logs)
    return elastic_launch(config, run_cell)(plan, threads, cell_module.PROGRESS_BARS)[0]  # rank 0's result


_main_pid = 0  # in a pool worker: the study's main process
_stopped = 0  # in a pool worker: the signal that came (0: none), after which it starts no other cell
_in_cell = False  # in a pool worker: a cell is running (train() handles its own signals while it trains)


@dataclass(frozen=True)
class Stopped:
    """What a cell stopped by a signal sends back from its worker: train()'s TrainingInterrupted does not unpickle,
    and a result the pool cannot read breaks the pool, which then kills the other workers' cells."""

    message: str
    signum: int


def _start_worker(main_pid: int) -> None:
    """A pool worker's set-up. Its own process group: a signal to the study's group (Ctrl-C) reaches only the main
    process, which passes it on once (a second signal would stop a cell at once, without a checkpoint). On Linux,
    SIGTERM when the main process dies without passing one on. Its cells print log lines, a line at a time, not
    progress bars: the workers share the study's terminal or log."""
    global _main_pid
    _main_pid = main_pid
    cell_module.PROGRESS_BARS = False
    if callable(reconfigure := getattr(sys.stdout, "reconfigure", None)):  # whole lines even into a pipe or a file
        reconfigure(line_buffering=True)
    os.setpgrp()
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    for signum in SIGNALS:
        signal.signal(signum, _stop_worker)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # one that came while it started is handled now


@contextlib.contextmanager
def _blocked(signums):
    """`signums` held back (pending, not lost) in this thread, and in the processes it starts meanwhile."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop_worker(signum, frame):
    """A signal outside train(): a running cell stops; an idle worker starts no other."""
    global _stopped
    _stopped = signum
    if _in_cell:
        raise KeyboardInterrupt(f"stopped by {signal_name(signum)}")


def _in_worker(fn: Callable, *args):
    """`fn(*args)` (a cell) in a pool worker, unless a signal came: then Stopped, as for a cell it stopped (the
    signal may have reached this worker alone: the main process must learn that its cells did not run)."""
    global _in_cell, _stopped
    try:
        _in_cell = True
        if _stopped:
            return Stopped(f"not started: its worker was stopped by {signal_name(_stopped)}", _stopped)
        return fn(*args)
    except KeyboardInterrupt as stop:  # train() took the signal itself
        _stopped = _stopped or getattr(stop, "signum", signal.SIGTERM)
        if os.getppid() != _main_pid:  # the main process is gone: nobody reads the result or ends this worker
            os._exit(128 + signal.SIGTERM)
        return Stopped(str(stop), _stopped)
    finally:
        _in_cell = False


class LocalExecutor:
    """Cells on this machine (implements `study.runner.Executor`)."""

    def __init__(self, workers: int = 1, threads: int | None = None, tasks_per_cell: int = 1):
        if workers < 1 or tasks_per_cell < 1:
            raise ValueError(f"--workers and --tasks-per-cell must be >= 1, got {workers} and {tasks_per_cell}")
        self.workers, self.threads, self.tasks_per_cell = workers, threads, tasks_per_cell

    def describe(self) -> str:
        tasks = f", {self.tasks_per_cell} processes each" if self.tasks_per_cell > 1 else ""
        return f"{self.workers} at a time{tasks}"

    def _cell(self, plan: CellPlan) -> CellResult | None:
        if self.tasks_per_cell > 1:
            return _run_distributed(plan, self.threads, self.tasks_per_cell)
        return run_cell(plan, threads=self.threads)

    def run(self, name: str, plans: Sequence[CellPlan | StartPlan],
            fn: Callable[[StartPlan, int | None], None] | None = None) -> bool:
        """Train the cells `plans` plan; a failing cell stops the study with its error, and one whose run folder
        another process holds (the same study started twice) is skipped: then False, the cell still to run.
        `fn(plan, threads)` instead runs that for each of `plans` (a retrofitting study's starting models)."""
        # with fn the plans are a retrofitting study's starts, without it cells
        calls: list[tuple]
        if fn is not None:
            calls = [(fn, start, self.threads) for start in cast(Sequence[StartPlan], plans)]
        else:
            check_split(plans, self.tasks_per_cell)
            calls = [(self._cell, plan) for plan in cast(Sequence[CellPlan], plans)]
        labels = [plan.label for plan in plans]
        return not (self._one_at_a_time if self.workers == 1 else self._in_pool)(calls, labels)

    @staticmethod
    def _one_at_a_time(calls: list[tuple], labels: list[str]) -> int:
        """`fn(*args)` for each of `calls` in this process, as `_in_pool` runs them (returns how many were skipped)."""
        held = 0
        for i, ((fn, *args), label) in enumerate(zip(calls, labels, strict=True), 1):
            print(f"[{i}/{len(calls)}] {label}", flush=True)
            try:
                fn(*args)
            except TrainingInterrupted as stopped:
                print(f"[{i}/{len(calls)}] {label}: {stopped}", flush=True)
                raise _study_stopped(stopped.signum) from None
            except FolderHeld as elsewhere:
                held += 1
                print(f"[{i}/{len(calls)}] {label}: {skipped_note(elsewhere.folder)}", flush=True)
        return held

    def _in_pool(self, calls: list[tuple], labels: list[str]) -> int:
        """`fn(*args)` for each of `calls`, `workers` at a time, a line for each as it finishes; a failing one stops the
        rest with its error, one whose folder another process holds is skipped (returns how many were). SIGINT or
        SIGTERM to the main process (alone or with its group, as Ctrl-C sends it) is passed on to the workers: the
        running calls stop at a checkpoint and say where, no other starts, then TrainingInterrupted (its exit_status the
        signal's: 130, 143); a second signal stops them at once."""
        # spawned, not forked: a fork of a process whose OpenMP threads ran (a notebook, a test session) hangs in
        # its first parallel region (GNU libgomp is not fork-safe)
        with ProcessPoolExecutor(min(self.workers, len(calls)), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_start_worker, initargs=(os.getpid(),)) as pool, \
                _PassOn(pool) as signals:
            with _blocked(SIGNALS):  # inherited by the workers as they spawn, until their handlers are set
                futures = [pool.submit(_in_worker, *call) for call in calls]
            worker_signal = 0  # a signal that stopped a worker alone (sent to its pid, not the study's)
            held = 0
            try:
                for i, (label, future) in enumerate(zip(labels, futures, strict=True), 1):
                    if signals.signum:
                        future.cancel()  # one not handed out yet
                    result = _outcome(future)
                    if isinstance(result, Stopped):
                        worker_signal = worker_signal or result.signum
                        print(f"[{i}/{len(calls)}] {label}: {result.message}", flush=True)
                    elif isinstance(result, FolderHeld):
                        held += 1
                        print(f"[{i}/{len(calls)}] {label}: {skipped_note(result.folder)}", flush=True)
                    elif isinstance(result, CellResult):
                        print(f"[{i}/{len(calls)}] {label}: val loss {result.val_loss:.4f} "
                              f"({result.seconds:.0f} s)", flush=True)
            except BaseException:  # a failed cell: no queued one starts, running ones finish
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        if signals.signum or worker_signal:
            raise _study_stopped(signals.signum or worker_signal, by_worker=not signals.signum)
        return held


def _study_stopped(signum: int, by_worker: bool = False) -> TrainingInterrupted:
    stopped = f"a worker was stopped by {signal_name(signum)}" if by_worker else f"stopped by {signal_name(signum)}"
    return TrainingInterrupted(signum, f"{stopped}: the running cells stopped at a checkpoint (lines above); the same "
                               "command resumes them", None)


def _outcome(future: Future):
    """A call's result, Stopped if a signal cut it short, None if it never started, FolderHeld if another process
    holds its folder."""
    try:
        return future.result()
    except FolderHeld as elsewhere:
        return elsewhere
    except KeyboardInterrupt as stop:  # a signal in the worker just before or after its cell
        return Stopped(str(stop), signal.SIGTERM)
    except CancelledError:
        return None


class _PassOn(SignalHandlers):
    """While the pool runs, in the main thread: the first SIGINT or SIGTERM is sent on to every worker (each in a
    process group of its own), which then start no other call; a second is sent on too; a third meets the
    handlers found (Ctrl-C raises KeyboardInterrupt). A signal ignored stays ignored."""

    def __init__(self, pool: ProcessPoolExecutor):
        self.pool, self.count, self.previous = pool, 0, {}
        self.signum: int | None = None

    def _handle(self, signum, frame):
        self.signum, self.count = self.signum or signum, self.count + 1
        if self.count > 1:
            self.__exit__()
        for pid in list(self.pool._processes or {}):  # _processes: the pool's workers by pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
