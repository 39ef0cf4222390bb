"""`depthattn prepare`: turn text into token shards and a manifest (layout in manifest.py).

1. Read the documents of every input (sources.py says what a document is for each kind of input).
2. Put each document in train or val by a seeded hash of its text (document_split): the split does
   not depend on input order, and identical documents always land together.
3. Train a byte-level BPE on the train documents, or take a given tokenizer; either way it is saved
   to OUT/tokenizer.
4. Encode every document, append EOS, and write each split as shards of `shard_tokens` tokens.
5. Write manifest.json last, so a directory with a manifest is always complete.

Everything is written into a hidden temporary folder beside the output folder; only once its manifest
is written do its files move in, taking the place of an older dataset's manifest, shards and tokenizer
(other files there are left alone). So a failed or killed run leaves the output folder as it was. A
folder that already holds a dataset (a manifest.json) is refused unless overwrite=True (--overwrite).
"""

import argparse
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..files import (AtomicFile, atomic_write_json, fsync_directory, make_folder, reporting_full_disk,
                     temporary_sibling)
from .errors import DataError
from .manifest import DTYPES, FORMAT, FORMAT_VERSION, MANIFEST_NAME, SPLITS, TOKENIZER_DIR, token_dtype_name
from .sources import DEFAULT_CHUNK_CHARS, EMBEDDED, describe_sources, iter_documents, resolve_sources
from .tokenizer import load_tokenizer, save_tokenizer, train_bpe_tokenizer

DEFAULT_VOCAB_SIZE = 4096
DEFAULT_VAL_FRACTION = 0.05
DEFAULT_SEED = 1337
DEFAULT_SHARD_TOKENS = 100_000_000  # 200 MB per uint16 shard
ENCODE_BATCH_DOCUMENTS = 64


def document_split(text: str, seed: int, val_fraction: float) -> str:
    """Return "val" for about `val_fraction` of documents, picked by a seeded hash of the text alone; else "train"."""
    digest = hashlib.sha256(f"{seed}\n{text}".encode("utf-8", "surrogatepass")).digest()
    return "val" if int.from_bytes(digest[:8], "big") < val_fraction * 2**64 else "train"


class ShardWriter:
    """Writes one split's token stream as files of `shard_tokens` tokens: {split}_000.bin, {split}_001.bin, ..."""

    def __init__(self, out_dir: Path, split: str, dtype: np.dtype, shard_tokens: int):
        self.out_dir, self.split, self.dtype, self.shard_tokens = out_dir, split, dtype, shard_tokens
        self.files = []  # manifest entries of the finished shards
        self.num_documents = 0
        self.shard = None  # the AtomicFile being written, if any
        self.shard_sha256 = None
        self.shard_num_tokens = 0

    def add_document(self, token_ids: list[int]) -> None:
        tokens = np.asarray(token_ids, dtype=self.dtype)  # (num_tokens,)
        self.num_documents += 1
        while tokens.size:  # a document may straddle shards
            if self.shard is None:
                self.shard = AtomicFile(self.out_dir / f"{self.split}_{len(self.files):03d}.bin")
                self.shard_sha256, self.shard_num_tokens = hashlib.sha256(), 0
            piece = tokens[: self.shard_tokens - self.shard_num_tokens]
            self.shard.write(piece.tobytes())
            self.shard_sha256.update(piece.tobytes())
            self.shard_num_tokens += piece.size
            tokens = tokens[piece.size :]
            if self.shard_num_tokens == self.shard_tokens:
                self._finish_shard()

    def _finish_shard(self) -> None:
        self.shard.commit()
        self.files.append(
            {"name": self.shard.path.name, "num_tokens": self.shard_num_tokens, "sha256": self.shard_sha256.hexdigest()}
        )
        self.shard = None

    def finish(self) -> dict:
        if self.shard is not None:
            self._finish_shard()
        num_tokens = sum(file["num_tokens"] for file in self.files)
        return {"num_documents": self.num_documents, "num_tokens": num_tokens, "files": self.files}

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self.shard is not None:  # only after an error: finish() leaves no shard open
            self.shard.discard()


def batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def refuse_previous_output(out_dir: Path, overwrite: bool) -> None:
    if (out_dir / MANIFEST_NAME).exists() and not overwrite:
        raise DataError(
            f"{out_dir} already holds a prepared dataset ({MANIFEST_NAME}). "
            "Pass --overwrite to replace it, or choose another --out."
        )


def dataset_entries(folder: Path) -> list[Path]:
    """The manifest (first), shards and tokenizer folder of a dataset in `folder`, those that exist."""
    shard = re.compile(rf"^({'|'.join(SPLITS)})_\d+\.bin$")
    shards = sorted(p for p in folder.iterdir() if shard.match(p.name))
    return [p for p in (folder / MANIFEST_NAME, *shards, folder / TOKENIZER_DIR) if p.exists()]


def install_dataset(build_dir: Path, out_dir: Path) -> None:
    """Move the dataset built in `build_dir` into `out_dir` in place of an older one there: the old manifest
    goes first and the new one comes last, so `out_dir` never holds a manifest of the wrong shards."""
    make_folder(out_dir, "--out")
    old = temporary_sibling(out_dir)
    old.mkdir()
    for entry in dataset_entries(out_dir):
        os.replace(entry, old / entry.name)
    for entry in reversed(dataset_entries(build_dir)):
        os.replace(entry, out_dir / entry.name)
    fsync_directory(out_dir)
    shutil.rmtree(old)


@contextmanager
def building_dataset(out_dir: Path):
    """Yield a hidden temporary folder beside `out_dir` to build a dataset in; when the block ends well, the
    dataset moves into `out_dir` (install_dataset), and in any case the temporary folder goes."""
    make_folder(out_dir.parent, "--out")
    build_dir = temporary_sibling(out_dir)
    build_dir.mkdir()
    try:
        with reporting_full_disk(out_dir.parent):
            yield build_dir
            install_dataset(build_dir, out_dir)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


def prepare(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    text_field: str = "text",
    seed: int = DEFAULT_SEED,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    hf_split: str = "train",
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Tokenize `inputs` (paths, hf:NAME, or "embedded"; empty means embedded) into `out_dir`; return the manifest.

    With `tokenizer` (a Hugging Face tokenizer directory) that tokenizer is used, else a byte-level
    BPE of `vocab_size` tokens is trained on the train documents.
    """
    if not 0 < val_fraction < 1:
        raise DataError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}. Fix --val-fraction.")
    if shard_tokens < 1 or chunk_chars < 1:
        raise DataError(f"shard_tokens and chunk_chars must be positive, got {shard_tokens} and {chunk_chars}.")
    out_dir = Path(out_dir)
    sources = resolve_sources(inputs)
    refuse_previous_output(out_dir, overwrite)

    def documents(desc: str) -> Iterator[str]:
        return tqdm(
            iter_documents(sources, text_field, hf_split, chunk_chars), desc=desc, unit="doc", disable=not progress
        )

    def split_of(text: str) -> str:
        return document_split(text, seed, val_fraction)

    with building_dataset(out_dir) as build_dir:
        if tokenizer is None:
            train_texts = (text for text in documents("train tokenizer") if split_of(text) == "train")
            hf_tokenizer = train_bpe_tokenizer(train_texts, vocab_size, build_dir / TOKENIZER_DIR)
            origin = f"byte-level BPE trained on the train split, vocab_size {vocab_size} requested"
        else:
            hf_tokenizer = load_tokenizer(tokenizer)
            save_tokenizer(hf_tokenizer, build_dir / TOKENIZER_DIR)
            origin = str(Path(tokenizer).resolve())
        if hf_tokenizer.eos_token_id is None:
            raise DataError(
                f"tokenizer {tokenizer} has no eos_token, which ends every document. "
                'Set "eos_token" in its tokenizer_config.json.'
            )
        dtype_name = token_dtype_name(len(hf_tokenizer))

        with (
            ShardWriter(build_dir, "train", DTYPES[dtype_name], shard_tokens) as train_writer,
            ShardWriter(build_dir, "val", DTYPES[dtype_name], shard_tokens) as val_writer,
        ):
            writers = {"train": train_writer, "val": val_writer}
            for batch in batched(documents("encode"), ENCODE_BATCH_DOCUMENTS):
                # split_special_tokens: a literal "<|endoftext|>" inside a document is plain text, not EOS
                encoded = hf_tokenizer(batch, add_special_tokens=False, split_special_tokens=True, verbose=False)
                for text, token_ids in zip(batch, encoded["input_ids"], strict=True):
                    writers[split_of(text)].add_document(token_ids + [hf_tokenizer.eos_token_id])
            splits = {split: writer.finish() for split, writer in writers.items()}

        num_documents = sum(info["num_documents"] for info in splits.values())
        for split, info in splits.items():
            if info["num_documents"] == 0:
                raise DataError(
                    f"the {split} split got none of the {num_documents} documents (val_fraction {val_fraction}). "
                    "Change --val-fraction or --seed, or give more documents."
                )
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "source": describe_sources(sources),
            "text_field": text_field,
            "seed": seed,
            "val_fraction": val_fraction,
            "chunk_chars": chunk_chars,
            "shard_tokens": shard_tokens,
            "dtype": dtype_name,
            "tokenizer": {
                "path": TOKENIZER_DIR,
                "origin": origin,
                "vocab_size": len(hf_tokenizer),
                "eos_id": hf_tokenizer.eos_token_id,
            },
            "splits": splits,
        }
        atomic_write_json(build_dir / MANIFEST_NAME, manifest)
    return manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        nargs="+",
        default=[EMBEDDED],
        metavar="PATH",
        help="input files (.txt, .jsonl, .parquet), hf:NAME[:CONFIG] for a Hugging Face dataset, "
        f"or {EMBEDDED} for the built-in Shakespeare corpus (default)",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="output directory: shards, manifest.json, tokenizer/"
    )
    tokenizer_choice = parser.add_mutually_exclusive_group()
    tokenizer_choice.add_argument("--tokenizer", metavar="DIR", help="use this Hugging Face tokenizer directory")
    tokenizer_choice.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_VOCAB_SIZE,
        metavar="N",
        help="train a byte-level BPE tokenizer of N tokens (default %(default)s)",
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=DEFAULT_VAL_FRACTION,
        metavar="F",
        help="fraction of documents held out for validation (default %(default)s)",
    )
    parser.add_argument(
        "--text-field", default="text", metavar="NAME", help="JSONL field or Parquet/dataset column with the text"
    )
    parser.add_argument(
        "--hf-split", default="train", metavar="SPLIT", help="split of a hf: dataset to read (default %(default)s)"
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, metavar="N", help="seed of the train/val split (default %(default)s)"
    )
    parser.add_argument(
        "--shard-tokens",
        type=int,
        default=DEFAULT_SHARD_TOKENS,
        metavar="N",
        help="tokens per shard file (default %(default)s)",
    )
    parser.add_argument(
        "--chunk-chars",
        type=int,
        default=DEFAULT_CHUNK_CHARS,
        metavar="N",
        help="cut .txt inputs at blank lines into documents of about N characters (default %(default)s)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a prepared dataset already in --out")


def run(args: argparse.Namespace) -> int:
    try:
        manifest = prepare(
            args.input,
            args.out,
            tokenizer=args.tokenizer,
            vocab_size=args.vocab_size,
            val_fraction=args.val_fraction,
            text_field=args.text_field,
            seed=args.seed,
            shard_tokens=args.shard_tokens,
            chunk_chars=args.chunk_chars,
            hf_split=args.hf_split,
            overwrite=args.overwrite,
        )
    except DataError as error:
        print(f"depthattn prepare: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: vocab_size {manifest['tokenizer']['vocab_size']}, {manifest['dtype']}")
    for split, info in manifest["splits"].items():
        num_shards = len(info["files"])
        print(f"  {split}: {info['num_documents']:,} documents, {info['num_tokens']:,} tokens, {num_shards} shard(s)")
    return 0
