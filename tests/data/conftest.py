"""Shared small inputs for the data tests: a slice of the embedded corpus and a dataset made from it."""

import itertools

import pytest

from depthattn.data import embedded_corpus_documents, prepare
from tests.data.data_helpers import write_jsonl


@pytest.fixture(scope="session")
def small_docs() -> list[str]:
    """41 documents of up to 3,000 characters: every 5th document of the embedded corpus, cut short."""
    return [text[:3000] for text in itertools.islice(embedded_corpus_documents(), 0, None, 5)]


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory, small_docs):
    """small_docs prepared with a 300-token BPE, 20% validation and shards of 5,000 tokens."""
    root = tmp_path_factory.mktemp("prepared")
    docs_path = write_jsonl(root / "docs.jsonl", small_docs)
    prepare([str(docs_path)], root / "data", vocab_size=300, val_fraction=0.2, shard_tokens=5000, progress=False)
    return root / "data"
