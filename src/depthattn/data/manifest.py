"""Layout of a prepared dataset directory and its manifest.json.

    manifest.json       written last: a directory without it is incomplete
    tokenizer/          the Hugging Face tokenizer that made the tokens
    train_000.bin ...   raw little-endian token ids, uint16 or uint32, np.memmap-able
    val_000.bin ...

The tokens of a split are its shards concatenated in manifest order; each document ends with EOS.
Manifest keys: format, format_version, source, source_files, text_field, hf_split (the split of the hf: inputs;
null without one), seed, val_fraction, chunk_chars, text_chunks, document_cut, shard_tokens, dtype, tokenizer {path,
origin, vocab_size, eos_id; for a BPE that prepare trained also vocab_size_requested, sample_bytes (requested) and
sample_bytes_used (UTF-8 bytes of train text it was trained on)}, and
splits {train, val}, each {num_documents, num_tokens, files: [{name, num_tokens, sha256}]}.
source_files: [{input, path, sha256, attribution, license}] for each input read from a checked file (wikipedia), or
folder (linux-doc, which adds package, version, num_files and num_held_out_files; its sha256 is of the list of its
files and their contents: linux_doc.sources_checksum).
text_chunks: {num_files_cut (the text files cut at blank lines into documents of about chunk_chars characters),
num_documents (the documents they were cut into)}.
document_cut: {max_chars (the limit used), max_chars_requested, num_documents_cut (the documents longer than
max_chars), num_pieces (the documents they were cut into)}.
"""

import json
import os
from pathlib import Path

import numpy as np

from .errors import DataError

MANIFEST_NAME = "manifest.json"
TOKENIZER_DIR = "tokenizer"
FORMAT = "depthattn-token-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "val")
DTYPES: dict[str, np.dtype] = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}


def token_dtype_name(vocab_size: int) -> str:
    """uint16 while every id fits in it (vocab_size <= 65536), else uint32."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def read_manifest(data_dir: str | os.PathLike) -> dict:
    path = Path(data_dir) / MANIFEST_NAME
    if not path.is_file():
        raise DataError(
            f"no {MANIFEST_NAME} in {data_dir}: it is not a prepared dataset or its preparation did not "
            "finish. Prepare the text into a folder of its own and pass that: `depthattn prepare --input TEXT --out "
            "DIR` (TEXT: your files or folder, or embedded, wikipedia, linux-doc)."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(
            f"{path} is not valid JSON ({error}). Prepare it again from its text: `depthattn prepare --input "
            f"TEXT --overwrite --out {data_dir}`."
        ) from None
    version = (manifest.get("format"), manifest.get("format_version")) if isinstance(manifest, dict) else None
    if version != (FORMAT, FORMAT_VERSION):
        raise DataError(
            f"{path}: format {version} is not ({FORMAT!r}, {FORMAT_VERSION}), which this depthattn reads. "
            f"Prepare it again from its text with this version: `depthattn prepare --input TEXT --overwrite --out "
            f"{data_dir}`."
        )
    return manifest
