"""Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM to a study of several workers: every
running cell stops at a checkpoint of the step it reached and says so, the study ends with one line and the
signal's exit status, and the same command resumes every cell from its own checkpoint (shown after SIGINT: resuming
reads the same checkpoints whichever signal wrote them)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.study.test_study import write_study

# `depthattn` with a pause before each training step, and each process's steps started in LAUNCH_STEPS/<pid>; the
# spawned workers import this script as their __mp_main__, so the pause is theirs too
LAUNCHER = """
import os, pathlib, signal, sys, time
import depthattn.train.loop as loop
from depthattn.cli import main

real_step = loop.train_step
def train_step(step, *args, **kwargs):
    pathlib.Path(os.environ["LAUNCH_STEPS"], str(os.getpid())).write_text(str(step))
    time.sleep(float(os.environ.get("LAUNCH_STEP_SECONDS", "0")))
    return real_step(step, *args, **kwargs)
loop.train_step = train_step
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where the tests run with SIGINT ignored
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
"""
STEPS = 150  # at 0.2 s a step, half a minute: the signal comes long before a cell ends
REACHED = 3  # the step both cells have started when the signal comes


def study_command(tmp_path, tiny_data, seeds=(0,), steps=STEPS):
    config = write_study(tmp_path, tiny_data, seeds=seeds)  # two cells a seed: vanilla and depth_attention
    config.write_text(config.read_text().replace("steps = 3", f"steps = {steps}")
                      .replace("checkpoint_every = 2", "checkpoint_every = 1000").replace("eval_every = 2",
                                                                                          "eval_every = 1000"))
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    return [sys.executable, str(launcher), "study", str(config), "--workers", "2", "--threads", "1"]


def steps_started(folder):
    return [int(text) for text in (path.read_text() for path in folder.iterdir()) if text]


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signal_stops_every_running_cell_of_a_study_at_a_checkpoint(tiny_data, tmp_path, signum, to_group):
    steps = tmp_path / "steps"
    steps.mkdir()
    command = study_command(tmp_path, tiny_data)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LAUNCH_STEPS": str(steps), "LAUNCH_STEP_SECONDS": "0.2"}
    study = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + 240
    while len(started := steps_started(steps)) < 2 or min(started) < REACHED:  # both cells are training
        assert study.poll() is None, f"the study ended first: {study.communicate()}"
        assert time.monotonic() < deadline, "the cells took too long to start"
        time.sleep(0.05)
    os.killpg(study.pid, signum) if to_group else os.kill(study.pid, signum)
    out, err = study.communicate(timeout=120)

    assert study.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"depthattn study: stopped by {signal.Signals(signum).name}: "), err
    stopped = [int(n) for n in re.findall(rf"stopped by {signal.Signals(signum).name} after step (\d+), "
                                          "checkpoint saved in", out)]
    assert len(stopped) == 2 and min(stopped) >= REACHED, out
    checkpoints = sorted(int(p.name.removeprefix("step_")) for p in tmp_path.glob("runs/**/checkpoints/step_*"))
    assert checkpoints == sorted(stopped)
    if signum == signal.SIGTERM:  # resuming is shown after SIGINT: the same checkpoints, the same code
        return
    status = subprocess.run([*command[:4], "--status"], capture_output=True, text=True, timeout=120)
    assert sorted(int(n) for n in re.findall(rf"resumes at step (\d+) of {STEPS}\)", status.stdout)) == \
        sorted(stopped), status

    rerun = subprocess.run(command, env={**env, "LAUNCH_STEP_SECONDS": "0"}, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    for step in stopped:
        assert f"resuming after step {step}" in rerun.stdout, rerun.stdout


def test_a_signal_to_one_worker_stops_the_study_and_says_so(tiny_data, tmp_path):
    """SIGTERM to one worker's pid, not the study's: its cell stops at a checkpoint, and the study ends with that
    signal's status instead of "done" and 0 with cells missing (the cells handed to that worker never ran)."""
    steps = tmp_path / "steps"
    steps.mkdir()
    command = study_command(tmp_path, tiny_data, seeds=(0, 1), steps=20)  # four cells
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LAUNCH_STEPS": str(steps), "LAUNCH_STEP_SECONDS": "0.2"}
    study = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + 240
    while len(started := steps_started(steps)) < 2 or min(started) < REACHED:
        assert study.poll() is None, f"the study ended first: {study.communicate()}"
        assert time.monotonic() < deadline, "the cells took too long to start"
        time.sleep(0.05)
    os.kill(int(min(steps.iterdir(), key=lambda path: path.name).name), signal.SIGTERM)
    out, err = study.communicate(timeout=300)

    assert study.returncode == 128 + signal.SIGTERM, (out, err)
    assert err.splitlines()[-1].startswith("depthattn study: a worker was stopped by SIGTERM: "), err
    assert "done" not in out and len(re.findall(r"stopped by SIGTERM after step \d+, checkpoint saved", out)) == 1, out
    finished = len(list(tmp_path.glob("results/cells/*/*/seed_*.json")))
    assert finished + len(re.findall(r": (?:not started|stopped by SIGTERM)", out)) == 4, out
