"""Training under faults: divergence, damaged or half-written checkpoints, changed settings on resume, torn logs."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from depthattn.cli import main
from depthattn.train.config import OptimSection
from depthattn.train.optim import lr_factor
from tests.faults.conftest import damage as damage_weights
from tests.faults.conftest import train_args


def records(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def steps_of(out_dir):
    return sorted(p.name for p in (out_dir / "checkpoints").iterdir())


def all_finite(folder):
    return all(t.isfinite().all() for t in load_file(folder / "model.safetensors").values())


def test_a_diverging_run_stops_with_an_error_and_never_writes_nonfinite_weights(tiny_data, tmp_path, capsys):
    out_dir = tmp_path / "run"
    assert main(train_args(tiny_data, out_dir, 6, 2, "--optim.lr", "1e3")) == 1
    error = capsys.readouterr().err
    step = int(re.search(r"error: the gradient norm became nan at step (\d)", error).group(1))
    assert [r["step"] for r in records(out_dir)] == list(range(1, step)) and not (out_dir / "final").exists()
    assert steps_of(out_dir) == [f"step_{s:08d}" for s in range(2, step, 2)]
    assert f"{out_dir / 'checkpoints' / steps_of(out_dir)[-1]} is intact" in error
    assert all(all_finite(out_dir / "checkpoints" / name) for name in steps_of(out_dir))


def test_nonfinite_weights_after_an_update_are_never_checkpointed(tiny_data, tmp_path, capsys, monkeypatch):
    real_step, calls = torch.optim.AdamW.step, []

    def poisoning_step(self, *args, **kwargs):  # the update of step 4 leaves one weight infinite
        result = real_step(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 4:
            self.param_groups[0]["params"][0].data[0, 0] = math.inf
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoning_step)
    out_dir = tmp_path / "run"
    assert main(train_args(tiny_data, out_dir, 6, 2)) == 1
    assert "some weights became NaN or infinite at step 4; nothing was written" in capsys.readouterr().err
    assert steps_of(out_dir) == ["step_00000002"] and not (out_dir / "final").exists()
    assert [r["step"] for r in records(out_dir)] == [1, 2, 3]


@pytest.mark.parametrize("lr", ["nan", "inf", "0", "-1e-3"])
def test_learning_rates_must_be_finite_and_positive(tiny_data, tmp_path, capsys, lr):
    assert main(train_args(tiny_data, tmp_path / "run", 4, 2, "--optim.lr", lr)) == 1
    assert "optim.lr must be > 0 and finite" in capsys.readouterr().err


def test_a_seed_torch_cannot_take_is_refused_by_name(tiny_data, tmp_path, capsys):
    assert main(train_args(tiny_data, tmp_path / "run", 4, 2, "--train.seed", "-1")) == 1
    assert "train.seed must be an integer from 0 to 2**63 - 1 (torch's seed range), got -1" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_resume_refuses_changed_model_and_data_settings(tiny_run, tmp_path, tiny_data, capsys):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    argv = train_args(tiny_data, out_dir, 6, 2, "--model.method", "vanilla", "--data.seq_len", "16",
                      "--train.grad_accum", "2") + ["--resume"]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert 'model.method was "depth_attention", now "vanilla"; data.seq_len was 32, now 16; train.grad_accum ' \
           'was 1, now 2' in error
    assert {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()} == before  # nothing was touched


def test_resume_takes_new_steps_and_optimizer_settings(tiny_run, tmp_path, tiny_data):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    assert main(train_args(tiny_data, out_dir, 6, 3, "--optim.lr", "1e-3", "--train.keep_checkpoints", "1")
                + ["--resume", "--reschedule"]) == 0  # a new length: a new cosine schedule, asked for
    lrs = [r["lr"] for r in records(out_dir)]
    schedule = OptimSection(warmup_steps=1, min_lr_ratio=0.1)
    assert lrs[3] == 3e-3 * lr_factor(3, 4, schedule)  # step 4, before the resume
    assert lrs[4:] == [1e-3 * lr_factor(step, 6, schedule) for step in (4, 5)]
    assert steps_of(out_dir) == ["step_00000006"]


@pytest.mark.parametrize("damage", ["flip a byte", "truncate"])
def test_resume_falls_back_from_a_damaged_checkpoint(tiny_run, tmp_path, tiny_data, capsys, damage):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    weights = out_dir / "checkpoints" / "step_00000004" / "model.safetensors"
    damage_weights(weights, damage)
    assert main(["eval", str(weights.parent), "--data", str(tiny_data), "--no-progress"]) == 1
    assert "model.safetensors differs from its sha256" in capsys.readouterr().err

    assert main(train_args(tiny_data, out_dir, 5, 2) + ["--resume"]) == 0
    error = capsys.readouterr().err
    assert f"checkpoint {weights.parent} is damaged: model.safetensors differs from its sha256" in error
    assert f"resuming from {out_dir / 'checkpoints' / 'step_00000002'}, the newest whole checkpoint" in error
    assert [r["step"] for r in records(out_dir)] == [1, 2, 3, 4, 5]
    assert steps_of(out_dir) == ["step_00000004", "step_00000005"] and all_finite(out_dir / "final")



def test_a_damaged_newer_checkpoint_never_displaces_the_one_just_written(tiny_run, tmp_path, tiny_data):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    damage_weights(out_dir / "checkpoints" / "step_00000004" / "model.safetensors", "flip a byte")
    # resumed from step 2 and stopped at step 3, short of the damaged step 4: step 3 is the run's one whole checkpoint
    argv = train_args(tiny_data, out_dir, 3, 2, "--train.keep_checkpoints", "1") + ["--resume"]
    assert main([*argv, "--reschedule"]) == 0
    assert steps_of(out_dir) == ["step_00000003", "step_00000004"]
    assert main(argv) == 0  # and a run stopped there resumes from it


def test_a_damaged_checkpoint_passed_over_takes_no_kept_place_and_goes_once_passed(tiny_run, tmp_path, tiny_data):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    damage_weights(out_dir / "checkpoints" / "step_00000004" / "model.safetensors", "flip a byte")
    # every 3 steps from step 2: this run never writes a step 4, and keeps its own two whole checkpoints
    argv = train_args(tiny_data, out_dir, 6, 3, "--train.keep_checkpoints", "2") + ["--resume", "--reschedule"]
    assert main(argv) == 0
    assert steps_of(out_dir) == ["step_00000003", "step_00000006"]


SLOW_CHECKPOINT = """
import pathlib, sys, time
import torch
from depthattn.cli import main

real_save = torch.save
def save(state, path, *args, **kwargs):  # the trainer state of step 4 is written, then the process hangs
    real_save(state, path, *args, **kwargs)
    if isinstance(state, dict) and state.get("step") == 4:
        pathlib.Path(sys.argv[1]).touch()
        time.sleep(600)
torch.save = save
sys.exit(main(sys.argv[2:]))
"""


def test_sigkill_during_a_checkpoint_write_leaves_only_whole_checkpoints(tiny_data, tmp_path):
    out_dir, marker = tmp_path / "run", tmp_path / "writing"
    process = subprocess.Popen([sys.executable, "-c", SLOW_CHECKPOINT, str(marker), *train_args(tiny_data, out_dir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    while not marker.exists():
        assert process.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    checkpoints = out_dir / "checkpoints"
    half_written = [p.name for p in checkpoints.iterdir() if p.name.startswith(".step_00000004.")]
    assert len(half_written) == 1 and steps_of(out_dir) == [*half_written, "step_00000002"]

    assert main(train_args(tiny_data, out_dir) + ["--resume"]) == 0
    assert steps_of(out_dir) == ["step_00000002", "step_00000004"]  # the leftover is gone
    assert [r["step"] for r in records(out_dir)] == [1, 2, 3, 4] and all_finite(out_dir / "final")


def test_a_torn_last_metrics_line_is_dropped_with_a_notice(tiny_run, tmp_path, tiny_data, capsys):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    with open(out_dir / "metrics.jsonl", "a") as file:
        file.write('{"step": 5, "loss": 4.1, "lr"')  # a write cut short
    assert main(train_args(tiny_data, out_dir, 5, 2) + ["--resume", "--reschedule"]) == 0
    assert f"{out_dir / 'metrics.jsonl'}: dropped its last line" in capsys.readouterr().err
    assert [r["step"] for r in records(out_dir)] == [1, 2, 3, 4, 5]


def test_a_bad_metrics_line_before_the_last_names_the_file_and_line(tiny_run, tmp_path, tiny_data, capsys):
    out_dir = tmp_path / "run"
    shutil.copytree(tiny_run, out_dir)
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    (out_dir / "metrics.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    assert main(train_args(tiny_data, out_dir, 5, 2) + ["--resume", "--reschedule"]) == 1
    assert f"{out_dir / 'metrics.jsonl'}, line 2: not valid JSON" in capsys.readouterr().err


def test_resume_without_a_checkpoint_says_it_starts_from_scratch(tiny_data, tmp_path, capsys):
    assert main(train_args(tiny_data, tmp_path / "run", 1, 1) + ["--resume"]) == 0
    assert "holds no checkpoint to resume from yet: training starts from scratch" in capsys.readouterr().err


def test_an_out_dir_under_a_file_is_a_clear_error(tiny_data, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(train_args(tiny_data, tmp_path / "file" / "run")) == 1
    assert f"{tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err


def test_a_folder_another_process_trains_into_is_refused_and_left_as_it_is(tiny_data, tmp_path, capsys):
    """A study run twice at once, or a command started twice: the second would resume the same checkpoints and
    delete the first's half-written files as a killed run's leftovers."""
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    in_flight = out_dir / ".metrics.jsonl.0123456789abcdef.tmp"  # an atomic write of the other process
    in_flight.write_text("")
    hold = ("import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert main(train_args(tiny_data, out_dir, 1, 1) + ["--resume"]) == 1
        assert f"another process is writing into {out_dir}" in capsys.readouterr().err
        assert sorted(out_dir.iterdir()) == [in_flight]
    finally:
        holder.kill()
        holder.wait()
    assert main(train_args(tiny_data, out_dir, 1, 1)) == 0  # once it is gone
    assert not in_flight.exists()


def test_generate_reads_a_checkpoint_folder(tiny_run, capsys):
    assert main(["generate", str(tiny_run / "checkpoints" / "step_00000004"), "ROMEO.", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO.")


def test_generate_at_a_vanishing_temperature_is_greedy_and_notes_the_trained_length(tiny_run, capsys):
    final = str(tiny_run / "final")
    assert main(["generate", final, "ROMEO.", "--max-new-tokens", "40", "--temperature", "0"]) == 0
    greedy = capsys.readouterr()
    assert main(["generate", final, "ROMEO.", "--max-new-tokens", "40", "--temperature", "1e-40"]) == 0
    tiny = capsys.readouterr()  # it was transformers' "probability tensor contains either inf, nan"
    assert tiny.out == greedy.out and "new ones go past the 32 tokens the model was trained on" in tiny.err


def test_eval_scores_a_checkpoint_as_the_final_model_it_equals(tiny_run, tiny_data, tmp_path):
    """Blocks of the run's seq_len for a checkpoint as for final/ (they were of max_position_embeddings)."""
    from depthattn.loading import open_model

    checkpoint = tiny_run / "checkpoints" / "step_00000004"
    final = tiny_run / "final"
    assert open_model(checkpoint).default_context_length() == open_model(final).default_context_length() == 32
    losses = []
    for folder in (checkpoint, final):
        out = tmp_path / "e.json"
        assert main(["eval", str(folder), "--data", str(tiny_data), "--no-progress", "--out", str(out)]) == 0
        losses.append(json.loads(out.read_text())["loss"])
    assert losses[0] == losses[1]


def test_data_without_a_tokenizer_warns_and_generate_names_the_fix(tiny_data, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data, ignore=shutil.ignore_patterns("tokenizer"))
    assert main(train_args(data, tmp_path / "run", 1, 1)) == 0
    assert "holds no tokenizer" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "run" / "final"), "ROMEO."]) == 1
    assert "pass --tokenizer DIR" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "run" / "final"), "ROMEO.", "--max-new-tokens", "3",
                 "--tokenizer", str(tiny_data / "tokenizer")]) == 0
    assert capsys.readouterr().out.startswith("ROMEO.")


def test_a_run_that_is_all_warmup_says_so(tiny_data, tmp_path, capsys):
    assert main(train_args(tiny_data, tmp_path / "run", 2, 2, "--optim.warmup_steps", "2")) == 0
    assert "warning: optim.warmup_steps (2) is not shorter than train.steps (2)" in capsys.readouterr().err
    assert main(train_args(tiny_data, tmp_path / "other", 3, 3, "--optim.warmup_steps", "2")) == 0
    assert "warmup_steps" not in capsys.readouterr().err
