"""`depthattn eval`: loss, perplexity and bits per byte of a saved model on token shards or raw text.

The evaluated token stream is one start token (the tokenizer's BOS, or EOS where it has none, as lm-eval's
prefix token) followed by the text's tokens: the tokens of a prepared split (every document already ends with
EOS), or the tokens of each text file followed by EOS. So every token of the split or text is scored, each
exactly once, the first one given only the start token.

Windows (`window_spans`): window k feeds the tokens [k*stride, k*stride + block_size) and predicts the token
after each of them; it scores only targets that no earlier window scored.
- stride == block_size (the default): fixed blocks, as training's validation cuts the split: every target
  is scored in the block of the tokens before it, with context back to the block's first token.
- stride < block_size: a sliding window (Hugging Face's perplexity guide): after the first window, every
  scored target has at least block_size - stride earlier tokens of context besides the one just before it.

Reported: loss = total nats / scored tokens, perplexity = exp(loss), bits per byte = total nats / ln 2 /
UTF-8 bytes of the scored text. The bytes are counted by decoding the scored token ids with the model's
tokenizer (special tokens skipped: the EOS between documents adds its loss but no bytes), each document on
its own, so for raw text they are the bytes of the files as `prepare` reads them (no byte order mark, LF line
ends; the byte-level BPE round-trips exactly); a stream cut by --max-tokens inside a multi-byte character counts
U+FFFD there.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..data.manifest import TOKENIZER_DIR
from ..data.shards import TokenShards
from ..data.sources import read_text_pieces
from ..data.tokenizer import start_token_id
from ..loading import (
    check_data_tokenizer,
    check_data_vocab,
    holds_tokenizer,
    model_dtype_name,
    open_model,
    run_metadata,
)

DEFAULT_BATCH_SIZE = 8
DECODE_CHUNK_TOKENS = 1 << 20


class TokenStream:
    """`prefix` followed by the tokens of `source` (a TokenShards split or a 1-D integer array), at most
    `max_length` tokens in all; `read(start, length)` gives int64 arrays, reading shards lazily."""

    def __init__(self, source, prefix: Sequence[int] = (), max_length: int | None = None):
        self.source = source if hasattr(source, "read") else np.asarray(source, dtype=np.int64).reshape(-1)
        self.prefix = np.asarray(list(prefix), dtype=np.int64)
        length = len(self.prefix) + len(self.source)
        self.length = length if max_length is None else min(length, max_length)

    def __len__(self) -> int:
        return self.length

    def _read_source(self, start: int, length: int) -> np.ndarray:
        if length <= 0:
            return np.zeros(0, dtype=np.int64)
        if isinstance(self.source, np.ndarray):
            return self.source[start:start + length]
        return self.source.read(start, length)

    def read(self, start: int, length: int) -> np.ndarray:
        if start < 0 or start + length > self.length:
            raise IndexError(f"tokens [{start}, {start + length}) are outside the stream of {self.length} tokens")
        head = self.prefix[start:start + length]
        tail_start = max(0, start - len(self.prefix))
        return np.concatenate([head, self._read_source(tail_start, length - len(head))]).astype(np.int64)


def window_spans(num_tokens: int, block_size: int, stride: int | None = None) -> list[tuple[int, int, int]]:
    """(begin, length, num_scored) of every window over a stream of `num_tokens` tokens.

    A window feeds tokens [begin, begin + length) and predicts tokens [begin + 1, begin + length]; it scores
    the last `num_scored` of those targets. Together the windows score every token but the first once.
    """
    stride = block_size if stride is None else stride
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    if not 1 <= stride <= block_size:
        raise ValueError(f"stride must lie in [1, block size {block_size}], got {stride}: stride == block size "
                         "gives fixed blocks, a smaller stride a sliding window")
    if num_tokens < 2:
        raise ValueError(f"need at least 2 tokens to score one, got {num_tokens}")
    spans, scored_until, begin = [], 1, 0  # scored_until: the first target not scored yet
    while scored_until < num_tokens:
        length = min(block_size, num_tokens - 1 - begin)
        spans.append((begin, length, begin + length + 1 - scored_until))
        scored_until = begin + length + 1
        begin += stride
    return spans


def _batches(spans, batch_size: int):
    """Consecutive windows of equal length, at most batch_size together (only the last window may be shorter)."""
    batch: list = []
    for span in spans:
        if batch and (len(batch) == batch_size or span[1] != batch[0][1]):
            yield batch
            batch = []
        batch.append(span)
    if batch:
        yield batch


def _accepts_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@torch.no_grad()
def score_stream(model, stream, block_size: int, stride: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 progress: bool = False, nats_at: np.ndarray | None = None) -> tuple[float, int, int]:
    """(total nats, scored tokens, windows) of `model` on `stream` (anything with len() and read(start, n)).
    `nats_at`, an array of len(stream) floats, receives each scored target's loss at the target's position."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    spans = window_spans(len(stream), block_size, stride)
    device = next(model.parameters()).device
    keep_logits = _accepts_logits_to_keep(model)
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    num_scored = sum(span[2] for span in spans)
    bar = tqdm(total=num_scored, unit="tok", desc="eval", disable=None if progress else True,  # None: not in a log
               dynamic_ncols=True)
    for batch in _batches(spans, batch_size):
        length = batch[0][1]
        rows = torch.from_numpy(np.stack([stream.read(begin, length + 1) for begin, _, _ in batch])).to(device)
        keep = max(span[2] for span in batch)
        extra = {"logits_to_keep": keep} if keep_logits else {}
        logits = model(input_ids=rows[:, :-1], use_cache=False, **extra).logits[:, -keep:]  # (B, keep, V)
        nll = F.cross_entropy(logits.float().transpose(1, 2), rows[:, -keep:], reduction="none")  # (B, keep)
        scored = torch.tensor([span[2] for span in batch], device=device)
        mask = torch.arange(keep, device=device)[None] >= keep - scored[:, None]  # the last num_scored targets
        total += nll.double().masked_fill(~mask, 0).sum()
        if nats_at is not None:
            for row, (begin, length, num) in zip(nll.cpu().numpy(), batch, strict=True):
                nats_at[begin + length + 1 - num:begin + length + 1] = row[keep - num:]
        bar.update(sum(span[2] for span in batch))  # from the host: no device sync per batch
    bar.close()
    model.train(was_training)
    return total.item(), num_scored, len(spans)


def count_bytes(stream, tokenizer, start: int = 1, stop: int | None = None,
                chunk_tokens: int = DECODE_CHUNK_TOKENS) -> int:
    """UTF-8 bytes of tokens [start, stop) of `stream` decoded with `tokenizer`, special tokens skipped.

    Each document (tokens up to a special token) is decoded on its own, as it was encoded: a SentencePiece-style
    decoder (Metaspace: Llama 2, Mistral) drops a document's leading space only at the start of a decode. Read in
    pieces cut after special tokens, so that no piece splits a character."""
    stop = len(stream) if stop is None else stop
    special = np.asarray(sorted(set(tokenizer.all_special_ids)), dtype=np.int64)
    total, carry, position = 0, np.zeros(0, dtype=np.int64), start
    while position < stop:
        piece = stream.read(position, min(chunk_tokens, stop - position))
        position += piece.size
        tokens = np.concatenate([carry, piece])
        ends = np.flatnonzero(np.isin(tokens, special))
        cut = int(ends[-1]) + 1 if position < stop and ends.size else tokens.size
        documents = [document.tolist() for document in np.split(tokens[:cut], ends[ends < cut] + 1) if document.size]
        texts = tokenizer.batch_decode(documents, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        total += sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
        carry = tokens[cut:]
    return total


def compute_perplexity(model, tokens, block_size: int, stride: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
               tokenizer=None, progress: bool = False, documents: bool = False) -> dict:
    """Loss (nats/token), perplexity and, with `tokenizer`, bits per byte of `model` on `tokens`.

    `tokens`: a 1-D integer array, tensor or list, or a TokenStream / TokenShards; its first token is only
    context. With `documents` (needs `tokenizer`), also each document's summed nats and scored tokens, a document
    being the tokens up to and including each EOS (`document_nats`, `document_tokens`): what lets an interval
    resample the held-out documents. Python API of `depthattn eval`."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.cpu().numpy()
    stream = tokens if hasattr(tokens, "read") else TokenStream(tokens)
    if documents and tokenizer is None:
        raise ValueError("per-document losses need the tokenizer, which says where documents end (EOS)")
    nats_at = np.zeros(len(stream), dtype=np.float64) if documents else None
    nats, count, windows = score_stream(model, stream, block_size, stride, batch_size, progress, nats_at)
    loss = nats / count
    result: dict[str, Any] = {"loss": loss, "perplexity": math.exp(loss), "tokens": count, "windows": windows,
                              "nats": nats}
    if nats_at is not None:  # documents
        result["document_nats"], result["document_tokens"] = per_document(stream, nats_at, tokenizer.eos_token_id)
    if tokenizer is not None:
        num_bytes = count_bytes(stream, tokenizer)
        result["bytes"] = num_bytes
        result["bits_per_byte"] = nats / math.log(2) / num_bytes if num_bytes else float("nan")
    return result


def per_document(stream, nats_at: np.ndarray, eos_id: int) -> tuple[list[float], list[int]]:
    """Each document's summed nats and scored tokens, from the loss at every scored position of `stream` (all but
    the first). A document runs up to and including an EOS; a stream cut inside a document ends with that part."""
    tokens = stream.read(0, len(stream))
    document = np.concatenate([[0], np.cumsum(tokens[:-1] == eos_id)])  # (N,) the document of each position
    nats = np.bincount(document[1:], weights=nats_at[1:])
    counts = np.bincount(document[1:])
    return nats.tolist(), counts.tolist()


def encode_texts(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """The tokens of each text followed by EOS, as `prepare` writes documents (no start token)."""
    pieces = []
    for text in texts:
        # split_special_tokens: a literal "<|endoftext|>" inside the text is plain text, as in prepare
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True, verbose=False)["input_ids"]
        pieces.append(np.asarray(ids + [tokenizer.eos_token_id], dtype=np.int64))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


def evaluate_perplexity(
    model_dir: str | os.PathLike,
    *,
    data: str | os.PathLike | None = None,
    split: str = "val",
    text: Sequence[str | os.PathLike] | None = None,
    tokenizer: str | os.PathLike | None = None,
    block_size: int | None = None,
    stride: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_tokens: int | None = None,
    dtype: str = "float32",
    device: str | None = None,
    progress: bool = True,
) -> dict:
    """Evaluate the model saved in `model_dir` on a prepared split (`data`, `split`) or on text files (`text`).

    Returns the metrics (loss, perplexity, bits_per_byte, tokens, bytes, windows) and the settings."""

    if (data is None) == (not text):
        raise ValueError("pass exactly one of --data PREPARED_DIR or --text FILE...")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1, got {max_tokens}")
    opened = open_model(model_dir, dtype=dtype, device=device, with_tokenizer=False)  # found below: --data's too
    model, model_path, max_positions = opened.model, opened.path, opened.max_positions
    if block_size is None:
        block_size = opened.default_context_length()
    if max_positions is not None and block_size > max_positions:
        raise ValueError(f"block size {block_size} exceeds the model's max_position_embeddings ({max_positions}); "
                         f"pass --block-size {max_positions} or less")
    window_spans(2, block_size, stride)  # checks block size and stride before any data is read

    source: TokenShards | np.ndarray
    described: dict[str, object]
    if data is not None:
        shards = TokenShards(data, split)
        check_data_vocab(shards, model, data)
        tok = opened.load_tokenizer(tokenizer, fallbacks=(Path(data) / TOKENIZER_DIR,))
        if tokenizer is not None or holds_tokenizer(model_path):  # else tok is the dataset's own
            check_data_tokenizer(shards, data, tok)
        source, described = shards, {"data": str(data), "split": split}
    else:
        paths = [Path(p) for p in text or ()]  # text is given: checked above
        for path in paths:
            if not path.is_file():
                problem = "is a folder, not a file" if path.is_dir() else "does not exist"
                raise FileNotFoundError(f"text file {path} {problem}; pass existing UTF-8 text files to --text")
        tok = opened.load_tokenizer(tokenizer)
        texts = ["".join(read_text_pieces(path)) for path in paths]  # as prepare reads a text file
        source, described = encode_texts(tok, texts), {"text": [str(p) for p in paths]}
        if len(source) == len(paths):  # only the EOS after each file
            raise ValueError(f"{', '.join(map(str, paths))} hold no text, so there is nothing to score; "
                             "pass non-empty text files")
    stream = TokenStream(source, prefix=[start_token_id(tok)],
                         max_length=None if max_tokens is None else max_tokens + 1)
    result = compute_perplexity(model, stream, block_size, stride, batch_size, tokenizer=tok, progress=progress)
    return {
        **result,
        "model": str(model_path),
        **described,
        "block_size": block_size,
        "stride": stride or block_size,
        "batch_size": batch_size,
        "max_tokens": max_tokens,
        "dtype": model_dtype_name(model),
        "device": str(next(model.parameters()).device),
        "bytes_counted": "UTF-8 bytes of the scored token ids decoded with the tokenizer, special tokens skipped",
        **run_metadata(),
    }
