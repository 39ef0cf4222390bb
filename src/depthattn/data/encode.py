"""Encode documents into token ids in worker processes, for `depthattn prepare`.

The main process reads the documents and sends them, in batches of about BATCH_CHARS characters, to
`workers` processes. Each worker loads the tokenizer once, runs it with its own threads off (so N workers
keep N cores busy), puts each document in train or val (document_split of its split_text), and sends back per
split one array of token ids, every document followed by EOS, already in the shards' dtype: the main process
only writes bytes. Results come back in input order with at most 2 x workers batches in flight, so memory stays
flat however large the input is, and the tokens do not depend on the number of workers.

Workers start from a forkserver that has imported this module (or are spawned where there is no forkserver):
a worker costs a fork, not a fresh import of depthattn (torch, transformers), and never inherits tokenizer
threads from the main process, which may have trained a BPE with them.
"""

import hashlib
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

from .errors import DataError
from .manifest import SPLITS
from .tokenizer import load_tokenizer

BATCH_CHARS = 1 << 18  # characters per batch: a fraction of a second of one worker's time
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def split_key(text: str, seed: int) -> int:
    """A seeded hash of the text alone, uniform in [0, 2**64): the document goes to val if it is below
    val_fraction * 2**64."""
    digest = hashlib.sha256(f"{seed}\n{text}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big")


def document_split(text: str, seed: int, val_fraction: float) -> str:
    """Return "val" for about `val_fraction` of documents, picked by a seeded hash of the text alone; else "train"."""
    return "val" if split_key(text, seed) < val_fraction * 2**64 else "train"


def split_text(document: tuple) -> str:
    """What the split of a document hashes: the document is (input, number, text), or (input, number, text,
    split_by) where its input holds out larger units than documents (linux-doc: the file's path, so that all the
    pieces of a file land in one split); the text in the first case, split_by in the second."""
    return document[3] if len(document) > 3 else document[2]


def placed_split(document: tuple, seed: int, val_fraction: float) -> str:
    """The split of a document (input, number, text[, split_by]): document_split of its split_text."""
    return document_split(split_text(document), seed, val_fraction)


def utf8_size(text: str, where: str) -> int:
    """The number of UTF-8 bytes of `text`; a clear error for a lone surrogate, which no tokenizer can encode."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise DataError(
            f"{where}: character {error.start} is a lone surrogate ({text[error.start]!r}), not text; a JSON escape "
            "such as \\ud800 without its pair makes one. Fix or remove that document."
        ) from None


@dataclass(frozen=True)
class Batch:
    source: str  # the input its documents come from, as the user named it
    first: int  # the number of its first document in that input, counting from 1
    texts: list[str]
    split_by: list[str] = field(default_factory=list)  # what the split hashes, one per text, where the input
    # gives it (split_text); empty: the texts themselves


def document_batches(documents: Iterable[tuple]) -> Iterator[Batch]:
    """Group (input, document number, text[, split_by]) in order into batches of about BATCH_CHARS characters of
    one input."""
    batch, chars = None, 0
    for document in documents:
        source, number, text = document[:3]
        if batch is None or number == 1 or chars >= BATCH_CHARS:  # the first batch, a new input, or a full batch
            if batch is not None:
                yield batch
            batch, chars = Batch(source, number, []), 0
        batch.texts.append(text)
        if len(document) > 3:
            batch.split_by.append(document[3])
        chars += len(text)
    if batch is not None:
        yield batch


def fast_tokenizer(tokenizer_dir: str | os.PathLike) -> Tokenizer:
    """The Rust tokenizer of a Hugging Face tokenizer folder, set up as `tokenizer(texts, add_special_tokens=False,
    split_special_tokens=True)` runs it: no padding or truncation, and special tokens' text inside a document (a
    literal "<|endoftext|>") encoded as plain text."""
    backend = load_tokenizer(tokenizer_dir).backend_tokenizer
    backend.no_padding()
    backend.no_truncation()
    backend.encode_special_tokens = True
    return backend


@dataclass(frozen=True)
class EncodeSettings:
    tokenizer_dir: str  # a Hugging Face tokenizer folder with a fast tokenizer (tokenizer.json)
    eos_id: int
    dtype: np.dtype  # of the shards
    seed: int  # of the train/val split
    val_fraction: float


class BatchEncoder:
    """Turns a Batch into {split: (the token ids of its documents in that split, each followed by EOS, in the
    shards' dtype; the number of those documents)}."""

    def __init__(self, settings: EncodeSettings):
        self.settings = settings
        self.tokenizer = fast_tokenizer(settings.tokenizer_dir)

    def __call__(self, batch: Batch) -> dict[str, tuple[np.ndarray, int]]:
        settings = self.settings
        ids: dict[str, list[int]] = {split: [] for split in SPLITS}
        num_documents = dict.fromkeys(SPLITS, 0)
        for key, encoding in zip(batch.split_by or batch.texts, self.encode(batch), strict=True):
            split = document_split(key, settings.seed, settings.val_fraction)
            ids[split] += encoding.ids
            ids[split].append(settings.eos_id)
            num_documents[split] += 1
        return {split: (np.array(ids[split], dtype=settings.dtype), num_documents[split]) for split in SPLITS}

    def encode(self, batch: Batch) -> list:
        try:
            # encode_batch_fast: the same ids as encode_batch, without character offsets, which nothing here reads
            return self.tokenizer.encode_batch_fast(batch.texts, add_special_tokens=False)
        except Exception:
            raise self.failure(batch) from None

    def failure(self, batch: Batch) -> DataError:
        """An error naming the first document of `batch` that the tokenizer cannot encode, and why."""
        for number, text in enumerate(batch.texts, batch.first):
            where = f"input {batch.source}, document {number}"
            utf8_size(text, where)  # the likeliest cause: raises for a lone surrogate
            try:
                self.tokenizer.encode(text, add_special_tokens=False)
            except Exception as error:
                return DataError(
                    f"{where}: the tokenizer cannot encode it ({type(error).__name__}: {error}). "
                    "Fix or remove that document, or use another --tokenizer."
                )
        return DataError(f"input {batch.source}: the tokenizer failed on documents from number {batch.first} on.")


_encoder: BatchEncoder | None = None  # a worker process's own, made by start_worker


def start_worker(settings: EncodeSettings) -> None:
    global _encoder
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker, so that N workers use N cores
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the main process, which then stops the workers
    _encoder = BatchEncoder(settings)


def encode_in_worker(batch: Batch) -> dict[str, tuple[np.ndarray, int]]:
    if _encoder is None:
        raise RuntimeError("encode_in_worker runs in a worker that start_worker started")
    return _encoder(batch)


def encode_in_order(
    batches: Iterable[Batch], settings: EncodeSettings, workers: int
) -> Iterator[dict[str, tuple[np.ndarray, int]]]:
    """Encode `batches` in `workers` processes; yield their encodings (BatchEncoder) in input order."""
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        # the default (__main__) and this module: takes effect when this process first starts its forkserver
        context.set_forkserver_preload(["__main__", __name__])
    in_flight: deque[tuple[Batch, Future]] = deque()  # (batch, future), oldest first
    with ProcessPoolExecutor(workers, mp_context=context, initializer=start_worker, initargs=(settings,)) as pool:
        try:
            for batch in batches:
                in_flight.append((batch, pool.submit(encode_in_worker, batch)))
                if len(in_flight) == 2 * workers:  # enough to keep every worker busy while the oldest is written
                    yield finished(*in_flight.popleft())
            while in_flight:
                yield finished(*in_flight.popleft())
        finally:  # after an error, do not wait for batches that nobody will write
            for _, future in in_flight:
                future.cancel()


def finished(batch: Batch, future: Future) -> dict[str, tuple[np.ndarray, int]]:
    try:
        return future.result()
    except DataError:
        raise
    except Exception as error:  # the worker process died (killed, or out of memory), or could not start
        raise DataError(
            f"input {batch.source}: a worker process failed while encoding documents from number {batch.first} on "
            f"({type(error).__name__}: {error}). If it ran out of memory, lower --workers."
        ) from error
