"""The private Slurm test cluster (tests/slurm_cluster.py) runs real jobs, and submitit drives it.

Skipped, with the reason shown, where Slurm is not installed or we are not root
(`.ci/run` installs the Debian packages).
"""

import os
import time
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, slurm_available, start_cluster


def _cluster(tmp_path_factory, **kwargs):
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    # 4 advertised CPUs whatever the machine has: a 2-task job and a sleeper can run side by side
    with start_cluster(tmp_path_factory.mktemp("slurm"), cpus=4, **kwargs) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real cluster without accounting storage: `sacct` fails, as on any cluster without slurmdbd."""
    yield from _cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def cluster_with_sacct(tmp_path_factory):
    """The same, with the `sacct` stand-in that answers submitit's state query from squeue."""
    yield from _cluster(tmp_path_factory, sacct_shim=True)


def _wait_state(cluster: SlurmCluster, job_id: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while cluster.job_state(job_id) != state:
        assert time.monotonic() < deadline, f"job {job_id} is {cluster.job_state(job_id)!r}, not {state}"
        time.sleep(0.1)


def _processes_with(marker: str) -> list[int]:
    """Processes whose environment has TEST_SLURM_MARKER=marker."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
            if f"TEST_SLURM_MARKER={marker}".encode() in environ:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sbatch_srun_squeue_scancel(cluster, tmp_path):
    # a wrapped command runs in the submission directory
    job = cluster.sbatch("--wrap", "echo hello > out.txt", cwd=tmp_path)
    assert cluster.wait_job(job) == "COMPLETED"
    assert (tmp_path / "out.txt").read_text() == "hello\n"

    # a 2-task job: srun starts both tasks
    script = tmp_path / "two.sh"
    script.write_text("#!/bin/bash\n#SBATCH --ntasks=2\nsrun bash -c 'echo task $SLURM_PROCID of $SLURM_NTASKS'\n")
    job = cluster.sbatch(f"--output={tmp_path / 'two.out'}", str(script), cwd=tmp_path)
    assert cluster.wait_job(job) == "COMPLETED"
    assert sorted((tmp_path / "two.out").read_text().splitlines()) == ["task 0 of 2", "task 1 of 2"]

    # a failing command is FAILED, a held job PENDING, a sleeper RUNNING; scancel ends both and its processes
    assert cluster.wait_job(cluster.sbatch("--wrap", "exit 3", cwd=tmp_path)) == "FAILED"
    held = cluster.sbatch("--hold", "--wrap", "true", cwd=tmp_path)
    marker = f"{os.getpid()}-{time.time_ns()}"
    sleeper = cluster.sbatch("--wrap", "sleep 300", cwd=tmp_path, env={"TEST_SLURM_MARKER": marker})
    _wait_state(cluster, sleeper, "RUNNING")
    assert cluster.job_state(held) == "PENDING"
    assert _processes_with(marker), "the sleeping job's processes carry the marker"
    cluster.run("scancel", held, sleeper)
    assert cluster.wait_job(held) == "CANCELLED"
    assert cluster.wait_job(sleeper) == "CANCELLED"
    deadline = time.monotonic() + 10
    while _processes_with(marker):
        assert time.monotonic() < deadline, "scancel left the job's processes running"
        time.sleep(0.1)


# functions submitit pickles and runs on the cluster
def _double(x):
    return 2 * x


def _fail():
    raise ValueError("boom")


def _rank():
    import submitit

    env = submitit.JobEnvironment()
    return env.global_rank, env.num_tasks, os.environ["SLURM_PROCID"]


def _executor(cluster, folder, **params):
    submitit = pytest.importorskip("submitit")
    executor = submitit.AutoExecutor(folder=folder)
    assert executor.cluster == "slurm"
    executor.update_parameters(slurm_partition=cluster.partition, timeout_min=5, **params)
    return executor


def test_submitit_results_arrays_tasks(cluster, tmp_path):
    with cluster.activate():
        executor = _executor(cluster, tmp_path / "%j")
        job = executor.submit(_double, 21)
        assert job.result() == 42

        jobs = executor.map_array(_double, [3, 4])
        assert [j.job_id.rsplit("_", 1)[1] for j in jobs] == ["0", "1"]
        assert [j.result() for j in jobs] == [6, 8]

        failing = executor.submit(_fail)
        error = failing.exception()
        assert error is not None and "ValueError: boom" in str(error)
        with pytest.raises(Exception, match="boom"):
            failing.result()

        executor.update_parameters(tasks_per_node=2)
        job = executor.submit(_rank)
        assert sorted(job.results()) == [(0, 2, "0"), (1, 2, "1")]

        # without accounting storage submitit never learns a job's state: `sacct` fails
        # ("Slurm accounting storage is disabled"), it logs a warning and says UNKNOWN
        assert job.state == "UNKNOWN"


def test_submitit_cancelled_job_without_accounting(cluster, tmp_path):
    """Only the result file tells submitit a job is over: a cancelled job is never done()."""
    with cluster.activate():
        job = _executor(cluster, tmp_path / "%j").submit(time.sleep, 300)
        _wait_state(cluster, job.job_id, "RUNNING")
        job.cancel()
        assert cluster.wait_job(job.job_id) == "CANCELLED"
        assert not job.done(force_check=True)  # job.wait()/result()/exception() would block for ever
        assert job.state == "UNKNOWN"


def test_submitit_cancelled_job_with_sacct_shim(cluster_with_sacct, tmp_path):
    cluster = cluster_with_sacct
    with cluster.activate():
        executor = _executor(cluster, tmp_path / "%j")
        job = executor.submit(time.sleep, 300)
        _wait_state(cluster, job.job_id, "RUNNING")
        assert job.get_info()["State"] == "RUNNING"
        job.cancel()
        assert cluster.wait_job(job.job_id) == "CANCELLED"
        assert job.done(force_check=True)
        assert job.state == "CANCELLED"
        job._results_timeout_s = 0  # else exception() first waits 15 s for a result file (slow file systems)
        assert "has not produced any output (state: CANCELLED)" in str(job.exception())

        jobs = executor.map_array(_double, [5, 6])
        assert [j.result() for j in jobs] == [10, 12]
        assert [j.state for j in jobs] == ["COMPLETED", "COMPLETED"]
