"""Short real training runs on a small slice of the embedded corpus."""

import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partialmethod
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from depthattn.train import TrainConfig, TrainingDiverged, train
from depthattn.train.checkpoint import checkpoint_step, step_name


def config(data, out_dir, *overrides):
    base = ["--data.path", str(data), "--data.seq_len", "32", "--train.out_dir", str(out_dir),
            "--train.batch_size", "4", "--train.steps", "12", "--train.eval_every", "4", "--train.eval_batches", "2",
            "--train.checkpoint_every", "4", "--train.progress", "false", "--optim.warmup_steps", "2",
            "--optim.lr", "3e-3"]
    return TrainConfig.load(None, base + list(overrides))


def losses(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_loss_decreases_and_export_reloads(tiny_data, tmp_path):
    summary = train(config(tiny_data, tmp_path / "run", "--train.steps", "30", "--train.eval_every", "15"))
    records = losses(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(1, 31))
    assert sum(r["loss"] for r in records[-5:]) / 5 < records[0]["loss"] - 0.5
    val = [r["val_loss"] for r in records if "val_loss" in r]
    assert len(val) == 2 and val[-1] < records[0]["loss"] - 0.5 and summary["val_loss"] == val[-1]

    final = tmp_path / "run" / "final"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    tokenizer = AutoTokenizer.from_pretrained(final)
    ids = tokenizer("To be, or not to be", return_tensors="pt").input_ids
    assert model.config.vocab_size == 384 and model(ids).logits.shape[-1] == 384
    out = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == ids.shape[1] + 5
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert checkpoints == ["step_00000028", "step_00000030"]  # keep_checkpoints = 2


def test_refuses_to_overwrite_a_run_without_resume(tiny_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_data.parent)
    train(config(tiny_data.name, tmp_path / "run", "--train.steps", "4"))
    # recorded absolute, as harness and eval read it from wherever they run
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["data"]["path"] == str(tiny_data)
    with pytest.raises(FileExistsError, match="--resume"):
        train(config(tiny_data, tmp_path / "run", "--train.steps", "4"))
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # to free the disk: the finished model stays
    model = (tmp_path / "run" / "final" / "model.safetensors").read_bytes()
    for resume in (False, True):  # --resume would start from scratch: no checkpoint
        with pytest.raises(FileExistsError, match="a finished run's model .final/. and no checkpoint"):
            train(config(tiny_data, tmp_path / "run", "--train.steps", "4", "--train.seed", "7"), resume=resume)
    assert (tmp_path / "run" / "final" / "model.safetensors").read_bytes() == model


def test_resume_after_sigkill_is_exact(tiny_data, tmp_path):
    args = ["--data.path", str(tiny_data), "--data.seq_len", "32", "--train.batch_size", "4", "--train.steps", "12",
            "--train.eval_every", "4", "--train.eval_batches", "2", "--train.checkpoint_every", "4",
            "--train.progress", "false", "--optim.warmup_steps", "2", "--optim.lr", "3e-3"]
    command = [sys.executable, "-m", "depthattn", "train", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    subprocess.run(command + ["--train.out_dir", str(tmp_path / "whole")], check=True, env=env,
                   capture_output=True)

    killed = tmp_path / "killed"
    process = subprocess.Popen(command + ["--train.out_dir", str(killed)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoints" / "step_00000004").exists():  # kill after the first checkpoint
        assert process.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    while len(losses(killed)) < 6 and process.poll() is None:  # ... and mid-way to the next
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "final").exists()

    subprocess.run(command + ["--train.out_dir", str(killed), "--resume"], check=True, env=env, capture_output=True)
    whole, resumed = losses(tmp_path / "whole"), losses(killed)
    assert [r["step"] for r in resumed] == list(range(1, 13))
    for a, b in zip(whole, resumed, strict=True):
        assert a["loss"] == b["loss"] and a.get("val_loss") == b.get("val_loss"), a["step"]
    for name in ("model.safetensors",):
        assert (killed / "final" / name).read_bytes() == (tmp_path / "whole" / "final" / name).read_bytes()


def test_nan_loss_stops_with_a_clear_error_and_keeps_the_checkpoint(tiny_data, tmp_path, monkeypatch):
    import depthattn.train.step as step

    real_loss = step.lm_loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real_loss(*args, **kwargs)
        return loss * math.nan if calls["n"] > 5 else loss  # step 6 goes bad

    monkeypatch.setattr(step, "lm_loss", poisoned)
    with pytest.raises(TrainingDiverged, match="step 6.*step_00000004 is intact"):
        train(config(tiny_data, tmp_path / "run", "--train.eval_every", "100"))
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000004"
    weights = AutoModelForCausalLM.from_pretrained(checkpoint).state_dict()
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert [r["step"] for r in losses(tmp_path / "run")] == [1, 2, 3, 4, 5]


def test_grad_accumulation_equals_a_bigger_batch(tiny_data, tmp_path):
    """Two micro-batches of 2 are the two halves of the batch of 4 (consecutive slices of one data order)."""
    train(config(tiny_data, tmp_path / "big", "--train.steps", "4", "--train.batch_size", "4"))
    train(config(tiny_data, tmp_path / "acc", "--train.steps", "4", "--train.batch_size", "2",
                 "--train.grad_accum", "2"))
    big, accumulated = losses(tmp_path / "big"), losses(tmp_path / "acc")
    for a, b in zip(big, accumulated, strict=True):
        assert a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


def test_compiled_training_compiles_every_layer_and_matches_eager(tiny_data, tmp_path, capsys, monkeypatch):
    """train.compile on more layers than dynamo's limit of graphs a function (its default 8, 1 here, so that 4 layers
    pass it), for three models in one process (a study's worker): every layer's graphs compile (the limit hit is an
    error here; at the default limit layers 9 on ran eagerly, and a limit sized for one model left the third eager)
    and the losses are eager's. The first two models' graphs go to dynamo's eager backend: they count against the
    limit as inductor's do, without kernels to build; the third's to aot_eager, dynamo and AOT autograd as inductor
    sees them (the losses and gradients checked), without inductor's C++ build, a minute on a cold cache
    (tests/ops/test_compile.py's slow test builds it for the depth mix; tests/model/test_gpu.py on a GPU)."""
    small = ["--train.steps", "2", "--train.eval_every", "2", "--model.overrides.num_hidden_layers", "4",
             "--model.overrides.hidden_size", "16", "--model.overrides.intermediate_size", "32",
             "--model.overrides.num_attention_heads", "2", "--model.overrides.num_key_value_heads", "1",
             "--model.overrides.depth_stride", "3"]
    train(config(tiny_data, tmp_path / "eager", *small))
    assert "compiled" not in capsys.readouterr().out
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=1,
                                    accumulated_recompile_limit=1), monkeypatch.context() as patch:
        patch.setattr(torch.nn.Module, "compile", partialmethod(torch.nn.Module.compile, backend="eager"))
        for method in ("vanilla", "value_residual"):
            train(config(tiny_data, tmp_path / method, *small, "--train.compile", "true", "--model.method",
                         method))
        patch.setattr(torch.nn.Module, "compile", partialmethod(torch.nn.Module.compile, backend="aot_eager"))
        train(config(tiny_data, tmp_path / "compiled", *small, "--train.compile", "true"))
    torch._dynamo.reset()
    assert "each layer compiled (the first steps and evaluations compile" in capsys.readouterr().out
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert [r["loss"] for r in compiled] == pytest.approx([r["loss"] for r in eager], abs=1e-4)
    assert [r["grad_norm"] for r in compiled] == pytest.approx([r["grad_norm"] for r in eager], rel=1e-3)


@pytest.mark.parametrize("method, loops", [("denseformer", 1), ("depth_quarter", 2)])
def test_methods_and_loops_train_by_preset_name(tiny_data, tmp_path, method, loops):
    summary = train(config(tiny_data, tmp_path / "run", "--train.steps", "3", "--model.method", method,
                           "--model.num_loops", str(loops)))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    assert model.config.num_loops == loops and math.isfinite(summary["val_loss"])
    assert model.config.cross_layer == {"denseformer": "denseformer", "depth_quarter": "depth_attention"}[method]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("progress, terminal", [(False, True), (True, False), (True, True)])
def test_log_lines_without_a_progress_bar(tiny_data, tmp_path, capsys, monkeypatch, progress, terminal):
    """A bar where one is asked for and stderr is a terminal; log lines otherwise (a log file reads no bar)."""
    from depthattn.train import TrainConfig, train

    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    train(TrainConfig.from_dict({
        "model": {"overrides": {"hidden_size": 32, "intermediate_size": 64}},
        "data": {"path": str(tiny_data), "seq_len": 32},
        "train": {"out_dir": str(tmp_path), "steps": 4, "batch_size": 2, "eval_every": 3, "eval_batches": 1,
                  "checkpoint_every": 4, "progress": progress, "log_every": 2}}))
    lines = [line for line in capsys.readouterr().out.splitlines() if " step " in line]
    if progress and terminal:
        assert lines == [] and "4/4" in stderr.getvalue()
    else:
        assert [line.split(" step ")[1].split(":")[0] for line in lines] == ["2/4", "3/4", "4/4"]
        assert "val " in lines[1] and "val " not in lines[0] and "4/4" not in stderr.getvalue()


def test_a_run_that_repeats_its_data_says_so(tiny_data, tmp_path, capsys):
    # 17 steps of 16 x 256 tokens pass over the slice's 65,214 training tokens 1.07 times
    train(config(tiny_data, tmp_path / "run", "--data.seq_len", "256", "--train.batch_size", "16", "--train.steps",
                 "17", "--train.checkpoint_every", "100", "--model.overrides.hidden_size", "32",
                 "--model.overrides.intermediate_size", "64", "--model.overrides.num_hidden_layers", "1"))
    assert "training tokens 1.1 times: the data repeats" in capsys.readouterr().out


def test_checkpoint_step_reads_a_checkpoint_folder_name_and_names_a_wrong_one():
    assert checkpoint_step(Path("run/checkpoints") / step_name(1234)) == 1234
    with pytest.raises(ValueError, match="step_XXXXXXXX"):
        checkpoint_step(Path("run/final"))
