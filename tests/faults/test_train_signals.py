"""Ctrl-C and SIGTERM during training: a checkpoint after the current step, one line, the signal's exit status; a
second signal stops at once; resuming continues exactly; the handlers live only while train() runs."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import depthattn.train.loop as loop
from depthattn.cli import main
from depthattn.train import TrainConfig, TrainingInterrupted, train
from depthattn.train.checkpoint import checkpoint_problem
from depthattn.train.interrupt import StopSignals
from tests.faults.conftest import train_args
from tests.worlds import run_world

# runs `depthattn` with what the tests need to catch a run mid-way, set by environment variables read only here:
# LAUNCH_STEP_SECONDS, a pause before each step; LAUNCH_SLOW_SAVES_AFTER=N, a trainer state of a step after N is
# written, then LAUNCH_MARKER is touched and the process sleeps; LAUNCH_PIDS, a folder where each process writes
# its pid as rank<RANK>.pid; LAUNCH_STEPS_STARTED, a file holding how many steps have started
LAUNCHER = """
import os, pathlib, sys, time
import torch
import depthattn.train.loop as loop
from depthattn.cli import main

if os.environ.get("LAUNCH_PIDS"):
    pathlib.Path(os.environ["LAUNCH_PIDS"], f"rank{os.environ.get('RANK', '0')}.pid").write_text(str(os.getpid()))
pause = float(os.environ.get("LAUNCH_STEP_SECONDS", "0"))
real_step = loop.train_step
started = 0
def train_step(*args, **kwargs):
    global started
    started += 1
    if os.environ.get("LAUNCH_STEPS_STARTED"):
        pathlib.Path(os.environ["LAUNCH_STEPS_STARTED"]).write_text(str(started))
    time.sleep(pause)
    return real_step(*args, **kwargs)
loop.train_step = train_step
real_save = torch.save
def save(state, path, *args, **kwargs):
    real_save(state, path, *args, **kwargs)
    after = os.environ.get("LAUNCH_SLOW_SAVES_AFTER")
    if after and isinstance(state, dict) and state.get("step", 0) > int(after):
        pathlib.Path(os.environ["LAUNCH_MARKER"]).touch()
        time.sleep(120)
torch.save = save
sys.exit(main(sys.argv[1:]))
"""
STEPS = 8
RUN = ("--train.eval_every", "4")  # with train_args(data, out_dir, STEPS, checkpoint_every)


def records(out_dir):
    path = out_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def steps_of(out_dir):
    return sorted(p.name for p in (out_dir / "checkpoints").iterdir())


def wait_for(condition, process, seconds=180):
    deadline = time.time() + seconds
    while not condition():
        assert process.poll() is None, f"the run ended first: {process.communicate()}"
        assert time.time() < deadline, "the run took too long to get there"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def signals_delivered():
    """Ctrl-C and SIGTERM reach the run, as at a terminal, also where `make test` inherited them ignored (nohup, a
    shell's background job): train() keeps an ignored signal ignored, and a child inherits SIG_IGN across exec."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    ignored = [signum for signum in defaults if signal.getsignal(signum) == signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, defaults[signum])
    yield
    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)


@pytest.fixture
def launcher(tmp_path):
    path = tmp_path / "launch.py"
    path.write_text(LAUNCHER)
    return path


def launch(launcher, argv, **settings):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **{f"LAUNCH_{k.upper()}": str(v) for k, v in settings.items()}}
    return subprocess.Popen([sys.executable, str(launcher), *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def whole_run(tiny_data, tmp_path_factory):
    """The losses of an uninterrupted run."""
    out_dir = tmp_path_factory.mktemp("signals") / "whole"
    assert main(train_args(tiny_data, out_dir, STEPS, 100, *RUN)) == 0
    return records(out_dir)


def assert_same_losses(out_dir, whole):
    resumed = records(out_dir)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    for a, b in zip(whole, resumed, strict=True):
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], a["step"]
        assert a.get("val_loss") == b.get("val_loss"), a["step"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_checkpoints_the_current_step_and_resume_is_exact(tiny_data, tmp_path, launcher, whole_run, signum):
    out_dir = tmp_path / "run"
    argv = train_args(tiny_data, out_dir, STEPS, 100, *RUN)  # no periodic checkpoint before the last step
    process = launch(launcher, argv, step_seconds=0.3)
    wait_for(lambda: records(out_dir), process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)

    assert process.returncode == 128 + signum == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]
    step = records(out_dir)[-1]["step"]
    assert step < STEPS and steps_of(out_dir) == [f"step_{step:08d}"]  # nothing but the interrupted step's
    checkpoint = out_dir / "checkpoints" / f"step_{step:08d}"
    assert checkpoint_problem(checkpoint) is None  # whole: every file, its sha256, finite weights
    assert torch.load(checkpoint / "trainer.pt", weights_only=True)["step"] == step
    name = signal.Signals(signum).name
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"depthattn train: stopped by {name} after step {step}, checkpoint saved in {checkpoint}; "
                          f"resume with: depthattn train --data.path {tiny_data} ")
    assert err.rstrip().endswith(" --resume") and not (out_dir / "final").exists()

    assert main(argv + ["--resume"]) == 0
    assert_same_losses(out_dir, whole_run)


def test_a_second_signal_during_the_checkpoint_write_stops_at_once(tiny_data, tmp_path, launcher, whole_run):
    out_dir, marker, started = tmp_path / "run", tmp_path / "writing", tmp_path / "started"
    argv = train_args(tiny_data, out_dir, STEPS, 2, *RUN)
    process = launch(launcher, argv, step_seconds=0.3, slow_saves_after=2, marker=marker, steps_started=started)
    # past step 2's checkpoint: a signal before step 3 starts would find that checkpoint current and write none
    wait_for(lambda: started.exists() and int(started.read_text() or 0) >= 3, process)
    process.send_signal(signal.SIGINT)  # the run finishes its step, then writes its checkpoint ...
    wait_for(marker.exists, process)
    time.sleep(0.5)  # (two signals close together may arrive as one)
    process.send_signal(signal.SIGINT)  # ... which the second cuts short
    started = time.time()
    out, err = process.communicate(timeout=60)

    assert process.returncode == 130 and time.time() - started < 30  # the launcher would sleep 120 s
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    match = re.match(r"depthattn train: stopped at once by a second SIGINT while writing the checkpoint of step (\d+): "
                     r"it was not written; the newest whole checkpoint is (\S+); resume with: depthattn train ", err)
    assert match and int(match[1]) > 2 and match[2] == str(out_dir / "checkpoints" / "step_00000002"), err
    assert os.listdir(out_dir / "checkpoints") == ["step_00000002"]  # the half-written folder is gone

    assert main(argv + ["--resume"]) == 0
    assert_same_losses(out_dir, whole_run)


def config(data, out_dir, steps=4):
    return TrainConfig.load(None, train_args(data, out_dir, steps, 2)[1:])


def signal_at(monkeypatch, target: str, when, signum=signal.SIGINT):
    """Send `signum` to this process when `when(call number)` holds, in loop.<target>; checks a handler of train's
    is installed first, so that pytest itself never sees the signal."""
    real, calls = getattr(loop, target), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if when(len(calls)):
            assert isinstance(getattr(signal.getsignal(signum), "__self__", None), StopSignals)
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, target, wrapped)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_in_process_a_signal_raises_training_interrupted_and_the_handlers_come_back(tiny_data, tmp_path, monkeypatch):
    mine = []

    def handler(signum, frame):
        mine.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal_at(monkeypatch, "train_step", lambda call: call == 3, signal.SIGTERM)
        with pytest.raises(TrainingInterrupted) as stopped:
            train(config(tiny_data, tmp_path / "run", 6))
        checkpoint = tmp_path / "run" / "checkpoints" / "step_00000003"
        assert stopped.value.exit_status == 143 and stopped.value.checkpoint == checkpoint
        assert str(stopped.value) == f"stopped by SIGTERM after step 3, checkpoint saved in {checkpoint}"
        assert steps_of(tmp_path / "run") == ["step_00000002", "step_00000003"] and mine == []
        assert isinstance(stopped.value, KeyboardInterrupt)  # what Ctrl-C raised before, for code that caught it
        assert signal.getsignal(signal.SIGINT) is handler and signal.getsignal(signal.SIGTERM) is handler
        os.kill(os.getpid(), signal.SIGTERM)  # outside train(), the process's own handlers again
        assert mine == [signal.SIGTERM]
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_a_signal_before_the_first_step_saves_nothing(tiny_data, tmp_path, monkeypatch):
    signal_at(monkeypatch, "build_optimizer", lambda call: True)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGINT before the first step: nothing new to save; the "
                                                  "run has no checkpoint yet") as stopped:
        train(config(tiny_data, tmp_path / "run"))
    assert stopped.value.checkpoint is None and stopped.value.exit_status == 130
    assert not (tmp_path / "run" / "checkpoints").exists() and not records(tmp_path / "run")


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_a_signal_after_a_step_with_nonfinite_weights_writes_no_checkpoint(tiny_data, tmp_path, monkeypatch):
    real_step, calls = torch.optim.AdamW.step, []

    def poisoning_step(self, *args, **kwargs):  # the update of step 3 leaves one weight infinite
        result = real_step(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            self.param_groups[0]["params"][0].data[0, 0] = float("inf")
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoning_step)
    signal_at(monkeypatch, "train_step", lambda call: call == 3)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(config(tiny_data, tmp_path / "run", 6))
    newest = tmp_path / "run" / "checkpoints" / "step_00000002"
    assert str(stopped.value) == (f"stopped by SIGINT after step 3, whose weights are NaN or infinite: no checkpoint "
                                  f"was written for it; the newest whole checkpoint is {newest} (resume from it with "
                                  "a lower --optim.lr)")
    assert stopped.value.checkpoint == newest and steps_of(tmp_path / "run") == ["step_00000002"]


def test_in_another_thread_train_leaves_signals_alone(tiny_data, tmp_path):
    before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    seen = {}

    def run():
        try:
            seen["summary"] = train(config(tiny_data, tmp_path / "run", 2))
        except BaseException as error:  # noqa: BLE001 - reported below
            seen["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert "error" not in seen and seen["summary"]["step"] == 2
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before


def test_two_processes_stop_after_the_same_step_when_one_is_signalled(tiny_data, tmp_path, launcher, one_world):
    """Under torchrun (2 gloo processes) only rank 1 gets SIGINT: both stop after the same step, rank 0 writes that
    step's checkpoint and says so, and the resumed run follows the curve of one process with the same global batch."""
    pytest.importorskip("torch.distributed.run")
    one = tmp_path / "one"
    assert main(train_args(tiny_data, one, STEPS, 100, *RUN, "--train.batch_size", "4")) == 0

    out_dir, pids = tmp_path / "two", tmp_path / "pids"
    pids.mkdir()
    argv = train_args(tiny_data, out_dir, STEPS, 100, *RUN)[1:]  # batch_size 2 per process
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LAUNCH_PIDS": str(pids), "LAUNCH_STEP_SECONDS": "0.3"}
    process = subprocess.Popen([*torchrun, str(launcher), "train", *argv], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (pids / "rank1.pid").exists() and records(out_dir), process)
    os.kill(int((pids / "rank1.pid").read_text()), signal.SIGINT)
    out, err = process.communicate(timeout=120)

    step = records(out_dir)[-1]["step"]
    checkpoint = out_dir / "checkpoints" / f"step_{step:08d}"
    assert step < STEPS and steps_of(out_dir) == [checkpoint.name] and checkpoint_problem(checkpoint) is None, err
    ours = [line for line in err.splitlines() if line.startswith("depthattn train:")]
    assert ours == [f"depthattn train: stopped by SIGINT after step {step}, checkpoint saved in {checkpoint}; resume "
                    f"with: torchrun <the same options> -m depthattn train {' '.join(argv)} --resume"], err
    assert "exitcode  : 130" in err  # torchrun's report of the workers' status

    result = run_world([*torchrun, "-m", "depthattn", "train", *argv, "--resume"], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    single, two = records(one), records(out_dir)
    assert [r["step"] for r in two] == list(range(1, STEPS + 1))
    for a, b in zip(single, two, strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4 and abs(a.get("val_loss", 0) - b.get("val_loss", 0)) < 1e-4, (a, b)
