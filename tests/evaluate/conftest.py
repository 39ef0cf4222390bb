"""A prepared slice of the embedded corpus and a Depth-Attention model trained on it for a few steps.

Nothing here may reach a model or dataset hub: every test module runs with the Hugging Face offline switches on
(depthattn's harness also reads them at call time and puts datasets and huggingface_hub offline)."""

import json
from itertools import islice

import pytest

from depthattn.data import document_split, embedded_corpus_documents, prepare
from depthattn.train import TrainConfig, train

SPLIT_SEED, VAL_FRACTION = 0, 0.2
SEQ_LEN = 64


@pytest.fixture(scope="module", autouse=True)
def _hub_offline():
    with pytest.MonkeyPatch.context() as patch:
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            patch.setenv(name, "1")
        yield


@pytest.fixture(scope="session")
def eval_documents() -> list[str]:
    """24 documents of the embedded corpus."""
    return list(islice(embedded_corpus_documents(), 24))


@pytest.fixture(scope="session")
def eval_data(tmp_path_factory, eval_documents):
    """eval_documents prepared with a 384-token BPE, 20% held out, shards of 5,000 tokens (several per split)."""
    root = tmp_path_factory.mktemp("eval_data")
    source = root / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in eval_documents))
    prepare([str(source)], root / "prepared", vocab_size=384, val_fraction=VAL_FRACTION, seed=SPLIT_SEED,
            shard_tokens=5000, progress=False)
    return root / "prepared"


@pytest.fixture(scope="session")
def val_documents(eval_documents) -> list[str]:
    return [d for d in eval_documents if document_split(d, SPLIT_SEED, VAL_FRACTION) == "val"]


def train_tiny(data, out_dir, method="depth_attention", steps=20, **overrides):
    settings = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, depth_stride=2)
    settings.update(overrides)
    config = TrainConfig.from_dict({
        "model": {"preset": "tiny", "method": method, "max_position_embeddings": 256, "overrides": settings},
        "data": {"path": str(data), "seq_len": SEQ_LEN},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "train": {"out_dir": str(out_dir), "steps": steps, "batch_size": 8, "eval_every": 1000, "eval_batches": 1,
                  "checkpoint_every": 1000, "progress": False, "seed": 0},
    })
    train(config)
    return out_dir / "final"


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory, eval_data):
    """The final folder (weights + tokenizer) of 20 training steps of a 4-layer Depth-Attention model (stride 2)."""
    return train_tiny(eval_data, tmp_path_factory.mktemp("run") / "depth_attention")
