"""A full disk, for real: training on a small tmpfs ends with one line naming the folder and the space a checkpoint
needs, the last good checkpoint stays whole and nothing half-written is left (root and a kernel that lets this
process mount tmpfs; elsewhere tests/faults/test_data_faults.py injects ENOSPC into the writer)."""

import contextlib
import os
import shutil
import subprocess

import pytest

from depthattn.cli import main
from depthattn.train.checkpoint import checkpoint_problem, list_checkpoints
from tests.faults.conftest import train_args


@contextlib.contextmanager
def small_disk(path, size, options=""):
    path.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(filter(None, [f"size={size}", options])), "tmpfs",
                              str(path)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_training_onto_a_full_disk_stops_in_one_line_and_keeps_the_last_good_checkpoint(tiny_data, tmp_path, capsys):
    with small_disk(tmp_path / "disk", "1200k") as disk:
        out_dir = disk / "run"
        assert main(train_args(tiny_data, out_dir, 40, 1, "--train.keep_checkpoints", "3")) == 1
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("depthattn train: error: no space left on "), error
        assert "free, this write needs about" in error[0] and "free some space and run again" in error[0]
        checkpoints = list_checkpoints(out_dir)
        assert checkpoints and all(checkpoint_problem(path) is None for path in checkpoints)
        leftovers = [p for p in [*out_dir.iterdir(), *(out_dir / "checkpoints").iterdir()] if p.name.startswith(".")]
        assert not leftovers and not (out_dir / "final").exists()
        shutil.rmtree(checkpoints[0])  # room for one more: the run resumes from its newest checkpoint
        assert main(train_args(tiny_data, out_dir, len(checkpoints) + 1, 1, "--train.keep_checkpoints", "1")
                    + ["--resume"]) == 0


def test_a_study_whose_results_disk_is_full_says_so_and_writes_no_half_result(tiny_data, tmp_path, capsys):
    from tests.study.test_study import write_study

    config = write_study(tmp_path, tiny_data, methods=["vanilla"], seeds=[0])
    with small_disk(tmp_path / "disk", "64k") as disk:
        with open(disk / "ballast", "wb", buffering=0) as ballast, contextlib.suppress(OSError):
            while True:  # fill the disk to its last block
                ballast.write(b"\0" * 4096)
        assert main(["study", str(config), "--results", str(disk / "results")]) == 1
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("depthattn study: error: no space left on ") and "free some space" in error
        assert not [p for p in (disk / "results").rglob("*") if p.is_file()]  # no half-written result
        (disk / "ballast").unlink()
        assert main(["study", str(config), "--results", str(disk / "results")]) == 0  # resumes, writes it
        assert len(list((disk / "results" / "cells").rglob("*.json"))) == 1
