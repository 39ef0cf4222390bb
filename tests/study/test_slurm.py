"""The study on a real single-node Slurm cluster (tests/study/slurm_cluster.py), through submitit: the same cells
as the local executor, multi-process cells, a cancelled cell that resumes, a failing cell that is reported.

Skipped, with the reason shown, where Slurm or submitit is missing or we are not root (`.ci/run` installs Slurm).
"""

import argparse
import json
import re
import time
from pathlib import Path

import pytest

from depthattn.commands.study import add_arguments, run
from depthattn.study import Cell, Study, run_study
from depthattn.study.local import LocalExecutor
from depthattn.study.store import CellStore

from .slurm_cluster import slurm_available, start_cluster
from .test_study import write_study


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("submitit", reason="the Slurm executor needs submitit: pip install 'depthattn[slurm]'")
    # 4 advertised CPUs whatever the machine has, so that a 2-task cell runs beside another cell
    with start_cluster(tmp_path_factory.mktemp("slurm"), cpus=4) as cluster, cluster.activate():
        yield cluster


def study_cli(*argv) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return run(parser.parse_args([str(a) for a in argv]))


def slurm_study(tmp_path, tiny_data, name, **kwargs):
    """A study whose checkpoints and results live under tmp_path/name, submitted one CPU per task."""
    path = write_study(tmp_path, tiny_data, name=f"{name}.toml", **kwargs)
    text = path.read_text().replace(str(tmp_path / "runs"), str(tmp_path / name / "runs"))
    path.write_text(text.replace(str(tmp_path / "results"), str(tmp_path / name / "results")))
    return path


def losses(study: Study) -> dict:
    return {(r.method, r.seed): r.val_loss for r in CellStore.of(study).read_results(study)}


def test_a_study_through_slurm_gives_the_local_cells_bitwise(cluster, tiny_data, tmp_path, capsys):
    local = Study.load(slurm_study(tmp_path, tiny_data, "local", seeds=(0,)))
    run_study(local, CellStore.of(local), LocalExecutor(threads=1))
    config = slurm_study(tmp_path, tiny_data, "slurm", seeds=(0,))
    assert study_cli(config, "--executor", "slurm", "--poll", "0.5") == 0
    slurm = Study.load(config)
    assert losses(slurm) == losses(local) and len(losses(slurm)) == 2  # 2 methods, bitwise
    out = capsys.readouterr().out
    assert "submitted 2 job(s) (array" in out and "done in" in out
    records = json.loads((tmp_path / "slurm" / "runs" / "slurm" / "jobs.json").read_text())
    assert len({r["job_id"].split("_")[0] for r in records.values()}) == 1  # one job array
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    assert "study slurm: 2 finished" in capsys.readouterr().out
    assert study_cli(config, "--executor", "slurm", "--poll", "0.5") == 0  # nothing left: nothing submitted
    assert "submitted" not in capsys.readouterr().out


def test_a_two_task_cell_matches_the_one_process_cell(cluster, tiny_data, tmp_path, one_world):
    one = Study.load(slurm_study(tmp_path, tiny_data, "one", methods=("vanilla",), seeds=(0,)))
    run_study(one, CellStore.of(one), LocalExecutor(threads=1))
    config = slurm_study(tmp_path, tiny_data, "two", methods=("vanilla",), seeds=(0,))
    assert study_cli(config, "--executor", "slurm", "--slurm", "tasks_per_cell=2", "--poll", "0.5") == 0
    a, b = (json.loads(CellStore.of(s).result_path(s, Cell({}, "vanilla", 0)).read_text())
            for s in (one, Study.load(config)))
    assert b["world_size"] == 2 and b["config"] == a["config"]  # the same cell, in two gloo DDP processes
    assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-4)  # only the order of float sums differs


def test_a_cancelled_cell_resumes_from_its_checkpoint_on_the_next_submission(cluster, tiny_data, tmp_path, capsys):
    steps = "steps = 3\n", "steps = 400\n"  # long enough (a few seconds) to be cancelled mid-way
    local = slurm_study(tmp_path, tiny_data, "whole", methods=("vanilla",), seeds=(0,))
    local.write_text(local.read_text().replace(*steps).replace("checkpoint_every = 2", "checkpoint_every = 50"))
    whole = Study.load(local)
    run_study(whole, CellStore.of(whole), LocalExecutor(threads=1))
    config = slurm_study(tmp_path, tiny_data, "cut", methods=("vanilla",), seeds=(0,))
    config.write_text(config.read_text().replace(*steps).replace("checkpoint_every = 2", "checkpoint_every = 50"))
    assert study_cli(config, "--executor", "slurm", "--detach") == 0
    job = json.loads((tmp_path / "cut" / "runs" / "slurm" / "jobs.json").read_text()).popitem()[1]["job_id"]
    cell = tmp_path / "cut" / "runs" / Study.load(config).cell_path(Cell({}, "vanilla", 0))
    deadline = time.monotonic() + 120
    while not any(cell.glob("checkpoints/step_*")):  # the first checkpoint, then scancel mid-cell
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    cluster.run("scancel", job)
    assert cluster.wait_job(job) == "CANCELLED"
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    assert "failed  " in capsys.readouterr().out
    assert study_cli(config, "--executor", "slurm", "--poll", "0.5") == 0  # submitted again, resumed, finished
    records = json.loads((tmp_path / "cut" / "runs" / "slurm" / "jobs.json").read_text())
    resumed = re.search(r"resuming after step (\d+)", Path(next(iter(records.values()))["stdout"]).read_text())
    assert resumed and 50 <= int(resumed.group(1)) < 400
    assert losses(Study.load(config)) == losses(Study.load(local))  # an exact resume: bitwise the whole run


def test_a_failing_cell_is_reported_with_its_log_and_the_others_finish(cluster, tiny_data, tmp_path, capsys):
    config = slurm_study(tmp_path, tiny_data, "fail", methods=("vanilla",), seeds=(0,), axes="""
[axes.start]
key = "model.init_from"
values = { fresh = "", missing = "/nonexistent/model" }
""")
    assert study_cli(config, "--executor", "slurm", "--poll", "0.5") == 1
    out = capsys.readouterr().out
    study = Study.load(config)
    assert CellStore.of(study).result_path(study, Cell({"start": "fresh"}, "vanilla", 0)).exists()
    assert not CellStore.of(study).result_path(study, Cell({"start": "missing"}, "vanilla", 0)).exists()
    failed = next(line for line in out.splitlines() if "; log: " in line)
    log = failed.split("log: ")[1]
    assert "/nonexistent/model" in Path(log).read_text() and "/nonexistent/model" in out  # the error, quoted
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    status = capsys.readouterr().out
    assert "finished" in status and log in status and "1 failed, 1 finished" in status


def test_the_slurm_status_counts_the_cells_the_study_trains_in_the_jobs_of_their_runs(tiny_data, tmp_path, capsys,
                                                                                        monkeypatch):
    """A baseline_only budget of another method was "not submitted" forever, and a branched run's shorter budget
    "not submitted" while its run's job ran. Slurm's queue is the one thing stood in for (squeue's answer)."""
    from depthattn.study.plan import plan_cell
    from depthattn.study.records import CellResult
    from depthattn.study.slurm import SlurmExecutor
    from depthattn.study.wanted import pending_cells

    from .test_study import WSD_BUDGETS

    axes = WSD_BUDGETS.replace("branches = true", 'branches = true\nbaseline_only = ["long"]')
    config = slurm_study(tmp_path, tiny_data, "s", axes=axes, seeds=(0,))
    study = Study.load(config)
    store = CellStore.of(study)
    runs = [plan_cell(study, store, cell) for cell in pending_cells(study, store)]  # vanilla's to long, DA's short
    executor = SlurmExecutor(None, study.out_dir)
    executor.folder.mkdir(parents=True)
    executor.record_path.write_text(json.dumps({str(run.path): {"job_id": f"7_{i}", "stderr": "log"}
                                                for i, run in enumerate(runs)}))
    monkeypatch.setattr(SlurmExecutor, "queued", lambda self: {f"7_{i}": "RUNNING" for i in range(len(runs))})
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "study s: 2 running", out  # the two runs, as local --status counts them

    monkeypatch.setattr(SlurmExecutor, "queued", lambda self: {})
    for cell in study.cells():  # vanilla's run diverged before either budget: its job left without a failure
        if cell.method == "vanilla":
            store.write_diverged(study.cell_path(cell), cell, "the training loss became nan at step 2", {})
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "study s: 2 diverged, 1 failed", out  # depth_attention's job left without its result
    assert {(executor.cell_states(store, [(run.cell, run.path)])[0]["state"]) for run in runs} == {"diverged",
                                                                                                "failed"}
    for cell in study.cells():
        store.write(study.cell_path(cell), CellResult(cell.method, cell.seed, 2.0, {"tokens_per_s": 1.0},
                                                      setting=cell.setting))
    assert study_cli(config, "--executor", "slurm", "--status") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "study s: 3 finished"


def test_a_cell_another_process_trains_is_running_elsewhere_and_its_tasks_skip_it(tiny_data, tmp_path, capsys,
                                                                                    monkeypatch):
    """The study run locally while its Slurm submission's job (or a second submission's) reaches the same cell: every
    task of the job skips it, before any joins the others (rank 0's error would leave the others waiting), and the
    status says where it runs instead of calling the job failed. Slurm's queue is stood in for (squeue's answer)."""
    import subprocess
    import sys

    from depthattn.study.plan import plan_cell
    from depthattn.study.slurm import SlurmExecutor, run_cell_task

    study = Study.load(slurm_study(tmp_path, tiny_data, "s", methods=("vanilla",), seeds=(0,)))
    store = CellStore.of(study)
    plan = plan_cell(study, store, Cell({}, "vanilla", 0))
    run = Path(plan.config.train.out_dir)
    run.mkdir(parents=True)
    executor = SlurmExecutor(None, study.out_dir)
    executor.folder.mkdir(parents=True)
    executor.record_path.write_text(json.dumps({str(plan.path): {"job_id": "7_0", "stderr": "log"}}))
    monkeypatch.setattr(SlurmExecutor, "queued", lambda self: {})
    hold = ("import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert executor.cell_states(store, [(plan.cell, plan.path)])[0]["state"] == "running elsewhere"
        assert run_cell_task(plan, 1, tasks=2) is None and run_cell_task(plan, 1, tasks=1) is None
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.count(f"vanilla seed 0: skipped: another process is training it (it holds {run};") == 2, err
    assert list(run.iterdir()) == [] and not store.has(plan.path)  # nothing trained, nothing written
    assert executor.cell_states(store, [(plan.cell, plan.path)])[0]["state"] == "failed"  # its job left, no result


def test_a_starting_model_whose_job_is_queued_is_not_submitted_again(tiny_data, tmp_path, monkeypatch, capsys):
    """A retrofitting study run again with --detach while its starting model's job ran submitted a second job into
    the same run folder. submitit's submission and Slurm's queue are stood in for: what is submitted is the test."""
    import contextlib
    from types import SimpleNamespace

    from depthattn.study import slurm

    submitted, queue, stays_queued = [], {}, [True]

    class Submitter:
        def __init__(self, folder):
            pass

        def update_parameters(self, **parameters):
            pass

        def batch(self):
            return contextlib.nullcontext()

        def submit(self, fn, plan, *args):
            job = str(500 + len(submitted))
            submitted.append(plan.label)
            if stays_queued[0]:
                queue[job] = "RUNNING"
            return SimpleNamespace(job_id=job, paths=SimpleNamespace(stdout=tmp_path / "out", stderr=tmp_path / "err"))

    monkeypatch.setattr(slurm, "_submitit", lambda: SimpleNamespace(SlurmExecutor=Submitter))
    monkeypatch.setattr(slurm.SlurmExecutor, "need_slurm", staticmethod(lambda: None))
    monkeypatch.setattr(slurm.SlurmExecutor, "queued", lambda self: dict(queue))
    slurm_study(tmp_path, tiny_data, "s", seeds=(0,))
    child = tmp_path / "r.toml"
    child.write_text(f'[study]\nextends = "s.toml"\nmethods = ["vanilla", "depth_attention"]\nseeds = [0]\n'
                     f'start_from = "vanilla"\nout_dir = "{tmp_path / "r" / "runs"}"\n'
                     f'results = "{tmp_path / "r" / "results"}"\n[base.train]\nsteps = 2\n')
    study_cli(child, "--executor", "slurm", "--detach")
    study_cli(child, "--executor", "slurm", "--detach")  # its job still runs
    assert submitted == ["seed 0"], submitted
    queue.clear()  # it left the queue without a model: submitted again, and a job that fails so is reported
    stays_queued[0] = False
    (tmp_path / "err").write_text("Traceback ...\nRuntimeError: out of memory\n")
    capsys.readouterr()
    assert study_cli(child, "--executor", "slurm", "--poll", "0") == 1 and submitted == ["seed 0", "seed 0"]
    out = capsys.readouterr().out
    assert "study r: starting model start/r/seed_0 failed (job 501)" in out and "RuntimeError: out of memory" in out
