"""Data pipeline: embedded corpus, BPE tokenizer, `prepare` (text -> token shards), shard loading and batches."""

from .corpus import embedded_corpus_documents, embedded_corpus_path, embedded_corpus_records
from .encode import document_split
from .errors import DataError
from .manifest import MANIFEST_NAME, TOKENIZER_DIR, read_manifest
from .prepare import prepare
from .shards import TokenBatches, TokenShards, eval_batches
from .tokenizer import EOS_TOKEN, PAD_TOKEN, load_tokenizer, train_bpe_tokenizer

__all__ = [
    "DataError",
    "EOS_TOKEN",
    "MANIFEST_NAME",
    "PAD_TOKEN",
    "TOKENIZER_DIR",
    "TokenBatches",
    "TokenShards",
    "document_split",
    "embedded_corpus_documents",
    "embedded_corpus_path",
    "embedded_corpus_records",
    "eval_batches",
    "load_tokenizer",
    "prepare",
    "read_manifest",
    "train_bpe_tokenizer",
]
