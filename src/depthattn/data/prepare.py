"""`depthattn prepare`: turn text into token shards and a manifest (layout in manifest.py).

1. Read the documents of every input, lazily (sources.py says what a document is for each kind of input),
   and cut each document longer than `max_document_chars` characters (default 32,768) into pieces of at most
   that many, at paragraph, line or word ends where there are any (sources.cut_document); each piece is a
   document from then on. If with that limit one split would get no document (a single short text), the limit
   is halved until both get one and the documents number at least 2 / val_fraction, down to 512
   (document_limit.py). The manifest records the limit used and what was cut.
2. Each document goes to train or val by a seeded hash of its text (encode.document_split): the split
   does not depend on input order, and identical documents always land together. The kernel's documentation
   (linux-doc) is held out by whole files instead: the hash of each file's path decides for all its documents.
3. Train a byte-level BPE on a bounded sample, the train documents in input order up to
   `tokenizer_sample_bytes` UTF-8 bytes (a first pass over the inputs, which stops there), or take a
   given tokenizer; either way it is saved to OUT/tokenizer.
4. Encode every document in `workers` processes (encode.py), append EOS, and write each split as shards
   of `shard_tokens` tokens, in input order: the output does not depend on the number of workers.
5. Write manifest.json last, so a directory with a manifest is always complete.

Everything is written into a hidden temporary folder inside the output folder; only once its manifest
is written do its files move in, taking the place of an older dataset's manifest, shards and tokenizer
(other files there are left alone). So a failed or killed run leaves the output folder as it was (the next
prepare there finishes what a kill left, recover_interrupted_prepare). One prepare at a time writes a folder
(a lock on it); a folder that already holds a dataset (a manifest.json) is refused unless overwrite=True
(--overwrite).
"""

import fcntl
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..files import (
    AtomicFile,
    atomic_write_json,
    check_output,
    fsync_directory,
    make_folder,
    reporting_full_disk,
    temporary_sibling,
)
from .document_limit import choose_max_document_chars
from .encode import EncodeSettings, document_batches, encode_in_order, placed_split, utf8_size
from .errors import DataError
from .manifest import DTYPES, FORMAT, FORMAT_VERSION, MANIFEST_NAME, SPLITS, TOKENIZER_DIR, token_dtype_name
from .sources import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_MAX_DOCUMENT_CHARS,
    HF_PREFIX,
    NAMED_INPUTS,
    CutStats,
    describe_sources,
    numbered_documents,
    resolve_sources,
    source_files,
)
from .tokenizer import load_tokenizer, save_tokenizer, train_bpe_tokenizer

DEFAULT_VOCAB_SIZE = 4096
BUILDING, REPLACED = "building", "replaced"  # hidden folders in --out while a prepare runs (temporary_sibling's names)
ALL_ASIDE = ".all_aside"  # in the REPLACED folder once every old file is in it: the dataset files in --out are new
DEFAULT_VAL_FRACTION = 0.05
DEFAULT_SEED = 1337
DEFAULT_SHARD_TOKENS = 100_000_000  # 200 MB per uint16 shard
DEFAULT_TOKENIZER_SAMPLE_BYTES = 2**30  # 1 GiB of train text is plenty for the merges of a BPE


def default_workers() -> int:
    """The CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class ShardWriter:
    """Writes one split's token stream as files of `shard_tokens` tokens: {split}_000.bin, {split}_001.bin, ..."""

    def __init__(self, out_dir: Path, split: str, dtype: np.dtype, shard_tokens: int):
        self.out_dir, self.split, self.dtype, self.shard_tokens = out_dir, split, dtype, shard_tokens
        self.files: list[dict] = []  # manifest entries of the finished shards
        self.num_documents = 0
        self.shard: AtomicFile | None = None  # the one being written, if any
        self.shard_sha256 = hashlib.sha256()  # of the shard being written
        self.shard_num_tokens = 0

    def add_documents(self, tokens: np.ndarray, num_documents: int) -> None:
        """Append the tokens (num_tokens,) of `num_documents` documents, each already followed by EOS."""
        tokens = np.asarray(tokens, dtype=self.dtype)  # no copy when it has the dtype already
        self.num_documents += num_documents
        while tokens.size:  # the tokens may straddle shards
            if self.shard is None:
                self.shard = AtomicFile(self.out_dir / f"{self.split}_{len(self.files):03d}.bin")
                self.shard_sha256, self.shard_num_tokens = hashlib.sha256(), 0
            piece = tokens[: self.shard_tokens - self.shard_num_tokens]
            data = piece.tobytes()
            self.shard.write(data)
            self.shard_sha256.update(data)
            self.shard_num_tokens += piece.size
            tokens = tokens[piece.size :]
            if self.shard_num_tokens == self.shard_tokens:
                self._finish_shard(self.shard)

    def _finish_shard(self, shard: AtomicFile) -> None:
        shard.commit()
        self.files.append(
            {"name": shard.path.name, "num_tokens": self.shard_num_tokens, "sha256": self.shard_sha256.hexdigest()}
        )
        self.shard = None

    def finish(self) -> dict:
        if self.shard is not None:
            self._finish_shard(self.shard)
        num_tokens = sum(file["num_tokens"] for file in self.files)
        return {"num_documents": self.num_documents, "num_tokens": num_tokens, "files": self.files}

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self.shard is not None:  # only after an error: finish() leaves no shard open
            self.shard.discard()


class TokenizerSample:
    """The texts of the train documents of `documents` ((input, number, text[, split_by]), in input order) up to
    `limit` UTF-8 bytes in all, to train a BPE on: whole documents, but the one that reaches the limit is cut there
    (at a character boundary) and reading stops. `used` counts the bytes given so far."""

    def __init__(self, documents: Iterable[tuple], limit: int, seed: int, val_fraction: float):
        self.documents, self.limit, self.seed, self.val_fraction = documents, limit, seed, val_fraction
        self.used = 0

    def __iter__(self) -> Iterator[str]:
        for document in self.documents:
            source, number, text = document[:3]
            if placed_split(document, self.seed, self.val_fraction) != "train":
                continue
            size = utf8_size(text, f"input {source}, document {number}")
            if self.used + size > self.limit:  # the document that reaches the limit: cut it there, and stop
                cut = text.encode("utf-8")[: self.limit - self.used].decode("utf-8", "ignore")
                self.used += len(cut.encode("utf-8"))
                if cut:
                    yield cut
                return
            self.used += size
            yield text


def refuse_previous_output(out_dir: Path, overwrite: bool) -> None:
    """Without `overwrite`, a folder holding a dataset, or files of a dataset's names (a tokenizer/ folder, shards
    of another run), is refused: replacing them would delete them."""
    found = dataset_entries(out_dir) if out_dir.is_dir() and not overwrite else []
    if found and found[0].name == MANIFEST_NAME:
        raise DataError(
            f"{out_dir} already holds a prepared dataset ({MANIFEST_NAME}). "
            "Pass --overwrite to replace it, or choose another --out."
        )
    if found:
        names = ", ".join(entry.name + ("/" if entry.is_dir() else "") for entry in found)
        raise DataError(f"{out_dir} holds files a dataset would replace ({names}), without a {MANIFEST_NAME}: "
                        "move them away, pass --overwrite to replace them, or choose another --out.")


def refuse_output_inside_input(out_dir: Path, inputs: Sequence[str | os.PathLike] | str | os.PathLike) -> None:
    """A dataset written inside a folder it reads would be read as text the next time (its manifest and tokenizer
    files)."""
    for item in [inputs] if isinstance(inputs, (str, os.PathLike)) else inputs:
        if str(item) in NAMED_INPUTS or str(item).startswith(HF_PREFIX):  # a corpus by name, not a folder here
            continue
        folder = Path(item)
        if folder.is_dir() and out_dir.resolve().is_relative_to(folder.resolve()):
            raise DataError(f"--out {out_dir} is inside the input folder {folder}: a later prepare of that folder "
                            "would read the dataset's own files as text. Choose an --out outside it.")


def dataset_entries(folder: Path) -> list[Path]:
    """The manifest (first), shards and tokenizer folder of a dataset in `folder`, those that exist."""
    shard = re.compile(rf"^({'|'.join(SPLITS)})_\d+\.bin$")
    shards = sorted(p for p in folder.iterdir() if shard.match(p.name))
    return [p for p in (folder / MANIFEST_NAME, *shards, folder / TOKENIZER_DIR) if p.exists()]


def install_dataset(build_dir: Path, out_dir: Path) -> None:
    """Move the dataset built in `build_dir` into `out_dir` in place of an older one there: the old manifest
    goes first and the new one comes last, so `out_dir` never holds a manifest of the wrong shards. The old files
    wait in a hidden folder inside `out_dir`, on its filesystem, so every move is a rename."""
    old = temporary_sibling(out_dir / REPLACED)
    old.mkdir()
    for entry in dataset_entries(out_dir):
        os.replace(entry, old / entry.name)
    (old / ALL_ASIDE).touch()
    for entry in reversed(dataset_entries(build_dir)):
        os.replace(entry, out_dir / entry.name)
    fsync_directory(out_dir)
    shutil.rmtree(old)


def recover_interrupted_prepare(out_dir: Path) -> None:
    """What a prepare killed in `out_dir` left (install_dataset's hidden folders): if its new manifest had not come
    in, the dataset files that had come in go and the old ones it had moved aside come back; a folder it was
    building, or an old dataset it had replaced, goes. Only under the folder's lock (`writing` calls it), so that no
    other prepare is running there."""
    for leftover in sorted(out_dir.glob(f".{REPLACED}.*.tmp")) + sorted(out_dir.glob(f".{BUILDING}.*.tmp")):
        if leftover.name.startswith(f".{REPLACED}.") and not (out_dir / MANIFEST_NAME).exists():
            if (leftover / ALL_ASIDE).exists():  # (else it stopped while moving the old files aside)
                for entry in dataset_entries(out_dir):
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            old = dataset_entries(leftover)
            for entry in reversed(old):  # the manifest last, as install_dataset moves it
                os.replace(entry, out_dir / entry.name)
            print(f"note: a prepare stopped while moving a dataset into {out_dir}: "
                  + ("the old one is back" if old else "its files are removed"), file=sys.stderr)
        shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def writing(out_dir: Path):
    """`out_dir`, made if missing, locked for this prepare alone while the block runs (a second one there would
    remove the folder this one builds in), what a killed prepare left there recovered first; afterwards it goes
    again if it was made here and stayed empty."""
    made = not out_dir.exists()
    make_folder(out_dir, "--out")
    descriptor = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the descriptor closes
        except BlockingIOError:
            raise DataError(f"another prepare is writing into {out_dir} now: wait for it to end, or choose another "
                            "--out.") from None
        except OSError:  # a filesystem without locks: unlocked, as before there were any
            pass
        recover_interrupted_prepare(out_dir)
        yield
    finally:
        os.close(descriptor)
        if made:
            with suppress(OSError):  # not empty: the dataset is in
                out_dir.rmdir()


@contextmanager
def building_dataset(out_dir: Path):
    """Yield a hidden temporary folder inside `out_dir` to build a dataset in (on the filesystem `out_dir` is on,
    wherever a link or a mount puts it: moving the dataset in is then a rename); when the block ends well, the
    dataset moves into `out_dir` (install_dataset), and in any case the temporary folder goes."""
    build_dir = temporary_sibling(out_dir / BUILDING)
    build_dir.mkdir()
    try:
        with reporting_full_disk(out_dir):
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
    tokenizer_sample_bytes: int = DEFAULT_TOKENIZER_SAMPLE_BYTES,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    text_field: str = "text",
    seed: int = DEFAULT_SEED,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    hf_split: str = "train",
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Tokenize `inputs` (paths, hf:NAME, "embedded", "wikipedia" or "linux-doc"; empty means embedded) into
    `out_dir`; return the manifest.

    Documents longer than `max_document_chars` characters are cut into pieces first; if then a split would get
    no document, the limit is lowered (document_limit.py; the module docstring, step 1).

    With `tokenizer` (a Hugging Face tokenizer directory) that tokenizer is used, else a byte-level BPE of
    `vocab_size` tokens is trained on the first `tokenizer_sample_bytes` UTF-8 bytes of the train documents.
    `workers` processes encode the documents (default: the CPUs this process may use); the output is the same
    for any number of them.
    """
    if not 0 < val_fraction < 1:
        raise DataError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}. Fix --val-fraction.")
    if min(shard_tokens, chunk_chars, max_document_chars) < 1:
        raise DataError(f"shard_tokens, chunk_chars and max_document_chars must be positive, got {shard_tokens}, "
                        f"{chunk_chars} and {max_document_chars}.")
    if tokenizer_sample_bytes < 1:
        raise DataError(f"tokenizer_sample_bytes must be positive, got {tokenizer_sample_bytes}. "
                        "Fix --tokenizer-sample-bytes.")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise DataError(f"workers must be at least 1, got {workers}. Fix --workers (by default, the "
                        f"{default_workers()} CPUs this process may use).")
    out_dir = Path(out_dir)
    sources = resolve_sources(inputs)
    refuse_output_inside_input(out_dir, inputs)
    try:
        check_output(out_dir, folder=True)
    except ValueError as error:
        raise DataError(str(error)) from None

    with writing(out_dir):
        refuse_previous_output(out_dir, overwrite)

        def documents_with_limit(limit: int, cuts: CutStats | None = None) -> Iterator[tuple]:
            # (input, number, text), or (input, number, text, split_by) for linux-doc
            return numbered_documents(sources, text_field, hf_split, chunk_chars, limit, cuts)

        limit = choose_max_document_chars(documents_with_limit, seed, val_fraction, max_document_chars)
        encoded_cuts = CutStats()  # counted by the encoding pass, which reads every document

        def documents(desc: str, cuts: CutStats | None = None) -> tqdm:
            return tqdm(documents_with_limit(limit, cuts), desc=desc, unit="doc",
                        disable=None if progress else True)  # None: no bar where stderr is not a terminal

        with building_dataset(out_dir) as build_dir:
            if tokenizer is None:
                with documents("sample for the tokenizer") as sample_documents:  # closes the bar if reading stops early
                    sample = TokenizerSample(sample_documents, tokenizer_sample_bytes, seed, val_fraction)
                    hf_tokenizer = train_bpe_tokenizer(sample, vocab_size, build_dir / TOKENIZER_DIR)
                tokenizer_info = {
                    "origin": f"byte-level BPE trained on the train split, vocab_size {vocab_size} requested",
                    "vocab_size_requested": vocab_size,
                    "sample_bytes": tokenizer_sample_bytes,  # requested
                    "sample_bytes_used": sample.used,
                }
            else:
                hf_tokenizer = load_tokenizer(tokenizer)
                save_tokenizer(hf_tokenizer, build_dir / TOKENIZER_DIR)
                tokenizer_info = {"origin": str(Path(tokenizer).resolve())}
            check_tokenizer(hf_tokenizer, tokenizer)
            dtype_name = token_dtype_name(len(hf_tokenizer))
            settings = EncodeSettings(
                str(build_dir / TOKENIZER_DIR), hf_tokenizer.eos_token_id, DTYPES[dtype_name], seed, val_fraction
            )
            splits = encode_splits(documents("encode", encoded_cuts), settings, build_dir, shard_tokens, workers)
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "source": describe_sources(sources),
                "source_files": source_files(sources, seed, val_fraction),
                "text_field": text_field,
                "hf_split": hf_split if any(source.kind == "hf" for source in sources) else None,
                "seed": seed,
                "val_fraction": val_fraction,
                "chunk_chars": chunk_chars,
                "text_chunks": {"num_files_cut": encoded_cuts.text_files, "num_documents": encoded_cuts.chunks},
                "document_cut": {
                    "max_chars": limit,
                    "max_chars_requested": max_document_chars,
                    "num_documents_cut": encoded_cuts.documents,
                    "num_pieces": encoded_cuts.pieces,
                },
                "shard_tokens": shard_tokens,
                "dtype": dtype_name,
                "tokenizer": {
                    "path": TOKENIZER_DIR,
                    **tokenizer_info,
                    "vocab_size": len(hf_tokenizer),
                    "eos_id": hf_tokenizer.eos_token_id,
                },
                "splits": splits,
            }
            atomic_write_json(build_dir / MANIFEST_NAME, manifest)
        return manifest


def check_tokenizer(hf_tokenizer, path: str | os.PathLike | None) -> None:
    """Refuse a tokenizer that prepare cannot use: one without EOS, or a slow (Python) one."""
    if hf_tokenizer.eos_token_id is None:
        raise DataError(
            f"tokenizer {path} has no eos_token, which ends every document. "
            'Set "eos_token" in its tokenizer_config.json.'
        )
    if not hf_tokenizer.is_fast:
        raise DataError(
            f"tokenizer {path} is not a fast tokenizer (the Rust `tokenizers` library), which prepare encodes with. "
            "Pass a folder with a tokenizer.json, such as the save_pretrained of a fast tokenizer."
        )


def encode_splits(
    documents: Iterable[tuple], settings: EncodeSettings, build_dir: Path, shard_tokens: int,
    workers: int
) -> dict:
    """Encode `documents` in `workers` processes and write both splits' shards; return their manifest entries."""
    with (
        ShardWriter(build_dir, "train", settings.dtype, shard_tokens) as train_writer,
        ShardWriter(build_dir, "val", settings.dtype, shard_tokens) as val_writer,
    ):
        writers = {"train": train_writer, "val": val_writer}
        for encoded in encode_in_order(document_batches(documents), settings, workers):
            for split, (tokens, num_documents) in encoded.items():
                writers[split].add_documents(tokens, num_documents)
        return {split: writer.finish() for split, writer in writers.items()}
