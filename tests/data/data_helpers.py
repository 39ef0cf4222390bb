"""Helpers for the data tests: write small inputs and token datasets."""

import json
from pathlib import Path

import numpy as np

from depthattn.data.manifest import DTYPES, FORMAT, FORMAT_VERSION, MANIFEST_NAME, TOKENIZER_DIR, token_dtype_name
from depthattn.data.prepare import ShardWriter
from depthattn.files import atomic_write_json


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: text}) + "\n" for text in texts), encoding="utf-8")
    return path


def write_token_dataset(out_dir: Path, tokens: np.ndarray, vocab_size: int = 2**16, shard_tokens: int = 4096) -> Path:
    """`tokens` as the train split of a dataset directory, without tokenizing anything (so ids are known)."""
    dtype_name = token_dtype_name(vocab_size)
    with ShardWriter(out_dir, "train", DTYPES[dtype_name], shard_tokens) as writer:
        writer.add_documents(tokens, 1)
        train = writer.finish()
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dtype": dtype_name,
        "tokenizer": {"path": TOKENIZER_DIR, "vocab_size": vocab_size, "eos_id": 0},
        "splits": {"train": train},
    }
    atomic_write_json(out_dir / MANIFEST_NAME, manifest)
    return out_dir


def decoded_documents(tokenizer, tokens: np.ndarray) -> list[str]:
    """Decode a split's tokens and cut them at EOS into its documents."""
    text = tokenizer.decode(tokens.tolist(), skip_special_tokens=False)
    assert text.endswith(tokenizer.eos_token)
    return text.split(tokenizer.eos_token)[:-1]
