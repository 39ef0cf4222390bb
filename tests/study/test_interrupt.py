"""Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM to a study of several workers: every
running cell stops at a checkpoint of the step it reached and says so, the study ends with one line and the
signal's exit status, and the study run again resumes every cell from its own checkpoint (shown after SIGINT:
resuming reads the same checkpoints whichever signal wrote them)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from depthattn.cli import main
from tests.study.test_study import write_study

# `depthattn` whose processes write each step they start in LAUNCH_STEPS/<pid>, hold at step LAUNCH_HOLD_AT until
# the file LAUNCH_RELEASE exists (the test signals meanwhile, so every cell stops after that step) and mark each
# signal a handler of theirs takes in LAUNCH_SIGNALLED/<pid> (the test releases a cell once its signal has come: the
# study passes a signal on to its workers, which may take longer than a step); the spawned workers import this
# script as their __mp_main__, so all of this is theirs too
LAUNCHER = """
import os, pathlib, signal, sys, time
import depthattn.train.loop as loop
from depthattn.cli import main

real_signal = signal.signal
def recording_signal(signum, handler):
    if not callable(handler):
        return real_signal(signum, handler)
    def recorded(signum, frame):
        pathlib.Path(os.environ["LAUNCH_SIGNALLED"], str(os.getpid())).touch()
        return handler(signum, frame)
    return real_signal(signum, recorded)
signal.signal = recording_signal

real_step = loop.train_step
def train_step(step, *args, **kwargs):
    pathlib.Path(os.environ["LAUNCH_STEPS"], str(os.getpid())).write_text(str(step))
    if step == int(os.environ.get("LAUNCH_HOLD_AT", "-1")):
        while not pathlib.Path(os.environ["LAUNCH_RELEASE"]).exists():
            time.sleep(0.02)
    return real_step(step, *args, **kwargs)
loop.train_step = train_step
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where the tests run with SIGINT ignored
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
"""
STEPS = 8
REACHED = 3  # the step every running cell holds at until the signal has come


def study_command(tmp_path, tiny_data, seeds=(0,)):
    config = write_study(tmp_path, tiny_data, seeds=seeds)  # two cells a seed: vanilla and depth_attention
    config.write_text(config.read_text().replace("steps = 3", f"steps = {STEPS}")
                      .replace("checkpoint_every = 2", "checkpoint_every = 1000").replace("eval_every = 2",
                                                                                          "eval_every = 1000"))
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    return [sys.executable, str(launcher), "study", str(config), "--workers", "2", "--threads", "1"]


def steps_started(folder):
    return [int(text) for text in (path.read_text() for path in folder.iterdir()) if text]


def start_held(command, tmp_path):
    """The study started, once both its workers' cells hold at step REACHED; returns it and the run's environment."""
    steps, signalled = tmp_path / "steps", tmp_path / "signalled"
    steps.mkdir()
    signalled.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LAUNCH_STEPS": str(steps), "LAUNCH_HOLD_AT": str(REACHED),
           "LAUNCH_RELEASE": str(tmp_path / "release"), "LAUNCH_SIGNALLED": str(signalled)}
    study = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + 240
    while len(started := steps_started(steps)) < 2 or min(started) < REACHED:  # both cells are training
        assert study.poll() is None, f"the study ended first: {study.communicate()}"
        assert time.monotonic() < deadline, "the cells took too long to start"
        time.sleep(0.05)
    return study, env


def release(tmp_path, pids):
    """Once each of the cells run by `pids` has taken its signal: all of them, then, stop after step REACHED."""
    deadline = time.monotonic() + 120
    while not all((tmp_path / "signalled" / str(pid)).exists() for pid in pids):
        assert time.monotonic() < deadline, "the signal did not reach every cell"
        time.sleep(0.02)
    (tmp_path / "release").touch()


def workers(tmp_path):
    """The pids of the processes whose cells hold."""
    return sorted(int(path.name) for path in (tmp_path / "steps").iterdir())


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signal_stops_every_running_cell_of_a_study_at_a_checkpoint(tiny_data, tmp_path, capsys, signum,
                                                                      to_group):
    command = study_command(tmp_path, tiny_data)
    study, env = start_held(command, tmp_path)
    if signum == signal.SIGINT:  # meanwhile, --status names the cells another process trains
        assert main(command[2:4] + ["--status"]) == 0
        shown = capsys.readouterr().out
        assert len(re.findall(r"^ +running  \S+/seed_0$", shown, re.MULTILINE)) == 2, shown
        assert ": 0 finished, 2 running, 0 to run" in shown, shown
    os.killpg(study.pid, signum) if to_group else os.kill(study.pid, signum)
    release(tmp_path, workers(tmp_path))
    out, err = study.communicate(timeout=120)

    assert study.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"depthattn study: stopped by {signal.Signals(signum).name}: "), err
    stopped = [int(n) for n in re.findall(rf"stopped by {signal.Signals(signum).name} after step (\d+), "
                                          "checkpoint saved in", out)]
    assert stopped == [REACHED, REACHED], out
    checkpoints = sorted(int(p.name.removeprefix("step_")) for p in tmp_path.glob("runs/**/checkpoints/step_*"))
    assert checkpoints == sorted(stopped)
    if signum == signal.SIGTERM:  # resuming is shown after SIGINT: the same checkpoints, the same code
        return
    assert main(command[2:4] + ["--status"]) == 0
    assert sorted(int(n) for n in re.findall(rf"resumes at step (\d+) of {STEPS}\)", capsys.readouterr().out)) == \
        sorted(stopped)

    # here, one cell after the other: resuming is the cell's own, whichever process runs it
    assert main(command[2:4] + ["--workers", "1", "--threads", "1"]) == 0
    rerun = capsys.readouterr().out
    for step in stopped:
        assert f"resuming after step {step}" in rerun, rerun

def test_a_signal_to_one_worker_stops_the_study_and_says_so(tiny_data, tmp_path):
    """SIGTERM to one worker's pid, not the study's: its cell stops at a checkpoint, and the study ends with that
    signal's status instead of "done" and 0 with cells missing (the cells handed to that worker never ran)."""
    command = study_command(tmp_path, tiny_data, seeds=(0, 1))  # four cells
    study, _ = start_held(command, tmp_path)
    signalled = min(workers(tmp_path))
    os.kill(signalled, signal.SIGTERM)
    release(tmp_path, [signalled])
    out, err = study.communicate(timeout=300)

    assert study.returncode == 128 + signal.SIGTERM, (out, err)
    assert err.splitlines()[-1].startswith("depthattn study: a worker was stopped by SIGTERM: "), err
    assert "done" not in out and len(re.findall(r"stopped by SIGTERM after step \d+, checkpoint saved", out)) == 1, out
    finished = len(list(tmp_path.glob("results/cells/*/*/seed_*.json")))
    assert finished + len(re.findall(r": (?:not started|stopped by SIGTERM)", out)) == 4, out
