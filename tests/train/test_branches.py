"""WSD cooldown branches: a branch equals a standalone WSD run of its length, bitwise, and a killed run resumes
without training a finished branch again."""

import json
from itertools import pairwise

import pytest

import depthattn.train.loop as loop
from depthattn.train import TrainConfig, train
from depthattn.train.config import OptimSection
from depthattn.train.optim import lr_factor

WSD = ["--optim.schedule", "wsd", "--optim.decay_fraction", "0.25", "--optim.warmup_steps", "2"]
# smaller than the tiny preset: a run here writes a checkpoint and a whole-split evaluation per branch
SMALL = ["--model.overrides.num_hidden_layers", "2", "--model.overrides.hidden_size", "64",
         "--model.overrides.intermediate_size", "128"]


def config(data, out_dir, steps, *overrides):
    base = ["--data.path", str(data), "--data.seq_len", "32", "--train.out_dir", str(out_dir),
            "--train.batch_size", "4", "--train.steps", str(steps), "--train.eval_every", "4",
            "--train.eval_batches", "2", "--train.checkpoint_every", "5", "--train.progress", "false",
            "--optim.lr", "3e-3", *WSD, *SMALL]
    return TrainConfig.load(None, base + list(overrides))


def records(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def weights(folder):
    return (folder / "final" / "model.safetensors").read_bytes()


@pytest.mark.parametrize("shape", ["linear", "1-sqrt", "cosine"])
def test_wsd_warms_up_holds_and_decays_to_the_floor(shape):
    optim = OptimSection(schedule="wsd", warmup_steps=4, decay_fraction=0.2, decay_shape=shape, min_lr_ratio=0.1)
    factors = [lr_factor(step, 100, optim) for step in range(100)]
    assert factors[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert set(factors[4:80]) == {1.0}  # stable: 100 - round(0.2 * 100) = 80 steps before the decay
    decay = factors[80:]
    assert all(a > b for a, b in pairwise(decay)) and decay[-1] == pytest.approx(0.1) and decay[0] < 1
    # the stable phase does not depend on the run's length: a shorter run is a longer one up to its decay
    assert [lr_factor(step, 50, optim) for step in range(40)] == factors[:40]


def test_branches_equal_standalone_runs_bitwise(tiny_data, tmp_path):
    heard = []
    summary = train(config(tiny_data, tmp_path / "run", 16, "--train.branch_steps", "[4, 8, 16]"),
                    on_budget=lambda steps, folder: heard.append((steps, folder)))
    run = tmp_path / "run"
    assert heard == [(4, run / "branches" / "steps_4"), (8, run / "branches" / "steps_8"), (16, run)]
    recorded = json.loads((run / "branches.json").read_text())
    assert {k: (v["decay_start"], v["tokens"]) for k, v in recorded.items()} == {
        "4": (3, 4 * 128), "8": (6, 8 * 128), "16": (12, 16 * 128)}
    assert recorded["16"]["val_loss"] == summary["val_loss_whole_split"]
    for steps in (4, 8, 16):
        alone = tmp_path / f"alone_{steps}"
        train(config(tiny_data, alone, steps))
        folder = run / recorded[str(steps)]["folder"]
        assert weights(folder) == weights(alone), steps
        fork = recorded[str(steps)]["decay_start"] if folder != run else steps
        branched = [r for r in records(run) if r["step"] <= fork] + (records(folder) if folder != run else [])
        assert [(r["step"], r["loss"], r["lr"]) for r in branched] == [
            (r["step"], r["loss"], r["lr"]) for r in records(alone)], steps


def test_a_killed_run_resumes_and_does_not_redo_finished_branches(tiny_data, tmp_path, monkeypatch):
    train(config(tiny_data, tmp_path / "whole", 12, "--train.branch_steps", "[4, 8]"))
    # steps in order: run 1-3, branch 4 (step 4), run 4-6, branch 8 (steps 7, 8), run 7-12
    real_step, calls = loop.train_step, []

    def step_that_fails_once(step, *args):
        calls.append(step)
        if len(calls) == 9:  # the branch of 8 steps, at its step 8
            raise RuntimeError("killed")
        return real_step(step, *args)

    monkeypatch.setattr(loop, "train_step", step_that_fails_once)
    killed = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="killed"):
        train(config(tiny_data, killed, 12, "--train.branch_steps", "[4, 8]"))
    assert list(json.loads((killed / "branches.json").read_text())) == ["4"]
    calls.clear()
    train(config(tiny_data, killed, 12, "--train.branch_steps", "[4, 8]"), resume=True)
    assert calls == [7, 8, 7, 8, 9, 10, 11, 12]  # branch 8 from its fork checkpoint, then the run from step 6
    assert json.loads((killed / "branches.json").read_text()) == json.loads(
        (tmp_path / "whole" / "branches.json").read_text())
    for folder in ("", "branches/steps_4", "branches/steps_8"):
        assert weights(killed / folder) == weights(tmp_path / "whole" / folder), folder


@pytest.mark.parametrize("overrides, message", [
    (["--train.branch_steps", "[4]", "--optim.schedule", "cosine"], 'needs optim.schedule = "wsd"'),
    (["--train.branch_steps", "[40]"], "must not exceed train.steps"),
    (["--train.branch_steps", "[4]", "--optim.warmup_steps", "4"], "before its 4 warmup steps end"),
    (["--train.branch_steps", "[0]"], "list of step counts > 0"),
    (["--optim.decay_shape", "square"], "optim.decay_shape"),
    (["--optim.decay_fraction", "0"], "optim.decay_fraction must lie in"),
])
def test_bad_branch_settings_name_the_fix(tiny_data, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        config(tiny_data, tmp_path / "run", 12, *overrides)
