"""A tiny training run (a few steps of a 2-layer model on the shared tiny dataset) and the arguments that make one;
a tiny saved model folder; damage done to a weights file."""

import shutil

import pytest

from depthattn.cli import main
from tests.helpers import tiny_model

TINY = ["--model.overrides.hidden_size", "32", "--model.overrides.intermediate_size", "64",
        "--model.overrides.num_hidden_layers", "2", "--model.overrides.num_attention_heads", "4",
        "--model.overrides.num_key_value_heads", "2", "--data.seq_len", "32", "--train.batch_size", "2",
        "--train.eval_every", "100", "--train.eval_batches", "1", "--train.progress", "false",
        "--optim.warmup_steps", "1", "--optim.lr", "3e-3"]


def train_args(data, out_dir, steps=4, checkpoint_every=2, *extra) -> list[str]:
    return ["train", "--data.path", str(data), "--train.out_dir", str(out_dir), "--train.steps", str(steps),
            "--train.checkpoint_every", str(checkpoint_every), *TINY, *extra]


@pytest.fixture(scope="session")
def tiny_run(tiny_data, tmp_path_factory):
    """A finished 4-step run with checkpoints at steps 2 and 4 (read only: copy it to change it)."""
    out_dir = tmp_path_factory.mktemp("faults") / "run"
    assert main(train_args(tiny_data, out_dir)) == 0
    return out_dir


@pytest.fixture
def model_dir(tmp_path, tiny_data):
    """A tiny saved model with the tiny dataset's tokenizer, and no checksums.json (as save_pretrained writes it)."""
    folder = tmp_path / "model"
    tiny_model(vocab_size=384, max_position_embeddings=64, depth_stride=2).save_pretrained(folder)
    for item in (tiny_data / "tokenizer").iterdir():
        shutil.copy(item, folder / item.name)
    return folder


def damage(weights, how: str) -> None:
    """"truncate" a weights file to half its length, or "flip a byte" near its end."""
    data = bytearray(weights.read_bytes())
    if how == "truncate":
        del data[len(data) // 2:]
    else:
        data[-100] ^= 1
    weights.write_bytes(bytes(data))
