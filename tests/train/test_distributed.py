"""2 processes on CPU (gloo) under torchrun see the loss curve of 1 process with the same global batch."""

import json
import sys

import pytest

from depthattn.train import TrainConfig, train
from tests.worlds import run_world


def run_args(data, out_dir, batch_size):
    return ["--data.path", str(data), "--data.seq_len", "32", "--train.batch_size", str(batch_size),
            "--train.steps", "6", "--train.eval_every", "3", "--train.eval_batches", "2",
            "--train.checkpoint_every", "3", "--train.progress", "false", "--optim.warmup_steps", "2",
            "--train.out_dir", str(out_dir)]


def records(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_match_one(tiny_data, tmp_path, parallel, one_world):
    train(TrainConfig.load(None, run_args(tiny_data, tmp_path / "one", 4)))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "depthattn", "train", *run_args(tiny_data, tmp_path / "two", 2), "--train.parallel", parallel]
    result = run_world(command, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = records(tmp_path / "one"), records(tmp_path / "two")
    assert [r["step"] for r in two] == list(range(1, 7))
    for a, b in zip(one, two, strict=True):
        assert a["tokens"] == b["tokens"]
        assert abs(a["loss"] - b["loss"]) < 1e-4, (a, b)
        assert abs(a.get("val_loss", 0) - b.get("val_loss", 0)) < 1e-4, (a, b)
    assert (tmp_path / "two" / "final" / "model.safetensors").exists()
