"""Tests that start a torch.distributed world of several processes (torchrun, a two-task Slurm job, a study's
multi-process cell) take the `one_world` fixture: across pytest-xdist workers one such world runs at a time, so no
two launches meet on a port. `run_world` runs a launch; one still running at its timeout fails the test with every
process's Python stacks (faulthandler, on SIGABRT) instead of stalling the run."""

import contextlib
import os
import signal
import subprocess

import psutil
import pytest


def run_world(command: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        launcher = psutil.Process(process.pid)
        stuck = [*launcher.children(recursive=True), launcher]  # the workers first: each prints its stacks
        signal_each(stuck, signal.SIGABRT)
        try:
            out, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            signal_each(stuck, signal.SIGKILL)
            out, err = process.communicate()
        pytest.fail(f"{' '.join(command)} ran past {timeout} s; its output and every process's stacks:\n"
                    f"{out[-3000:]}\n{err[-30000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def signal_each(processes: list[psutil.Process], signum: int):
    for each in processes:
        with contextlib.suppress(psutil.NoSuchProcess):  # it exited after it was listed
            each.send_signal(signum)
