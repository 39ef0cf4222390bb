import json
import os

import pytest
import torch

from depthattn.data import embedded_corpus_documents, prepare

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs one worker per CPU: each keeps to one thread
    os.environ["OMP_NUM_THREADS"] = "1"  # and so do the processes a test starts
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A small prepared dataset: the first 6,000 characters of 24 documents of the embedded corpus (65,214 training
    tokens, 21,557 held out: every run's final whole-split evaluation stays short), a 384-token BPE."""
    root = tmp_path_factory.mktemp("data")
    documents = [doc[:6000] for _, doc in zip(range(24), embedded_corpus_documents())]
    source = root / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    prepare([str(source)], root / "prepared", vocab_size=384, val_fraction=0.2, seed=0, progress=False)
    return root / "prepared"
