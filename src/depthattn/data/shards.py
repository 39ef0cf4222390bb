"""Read a prepared split as one token sequence, and cut it into training and evaluation batches."""

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from ..files import sha256_file
from .errors import DataError
from .manifest import DTYPES, MANIFEST_NAME, read_manifest


class TokenShards:
    """One split of a prepared dataset as a single 1-D token sequence over memory-mapped shards.

    Opening checks every shard listed in the manifest: it exists and has num_tokens * itemsize bytes;
    with verify=True (the default) also its sha256 and that all its ids are < vocab_size.
    """

    def __init__(self, data_dir: str | os.PathLike, split: str = "train", verify: bool = True):
        self.data_dir = Path(data_dir)
        self.split = split
        manifest = read_manifest(self.data_dir)
        manifest_path = self.data_dir / MANIFEST_NAME
        try:
            splits = manifest["splits"]
            if split not in splits:
                raise DataError(
                    f"unknown split {split!r}: {manifest_path} has {', '.join(map(repr, splits))}. Use one of those."
                )
            self.num_documents = splits[split]["num_documents"]
            self.vocab_size = manifest["tokenizer"]["vocab_size"]
            self.eos_id = manifest["tokenizer"]["eos_id"]
            self.tokenizer_path = self.data_dir / manifest["tokenizer"]["path"]
            self.dtype = DTYPES[manifest["dtype"]]
            entries = [(file["name"], file["num_tokens"], file["sha256"]) for file in splits[split]["files"]]
        except (KeyError, TypeError) as error:
            raise DataError(
                f"{manifest_path} is malformed (bad or missing {error}). "
                f"Run `depthattn prepare --overwrite --out {self.data_dir}`."
            ) from None
        self.shards = [self._open_shard(name, num_tokens, sha256, verify) for name, num_tokens, sha256 in entries]
        self.offsets = np.cumsum([0] + [len(shard) for shard in self.shards])  # (num_shards + 1,) first token of each

    def _open_shard(self, name: str, num_tokens: int, sha256: str, verify: bool) -> np.memmap:
        path = self.data_dir / name
        fix = f"Run `depthattn prepare --overwrite --out {self.data_dir}` to rebuild the dataset."
        if not path.is_file():
            raise DataError(f"shard {path} listed in {MANIFEST_NAME} is missing. {fix}")
        expected_bytes = num_tokens * self.dtype.itemsize
        if path.stat().st_size != expected_bytes:
            raise DataError(
                f"shard {path} has {path.stat().st_size} bytes, but {MANIFEST_NAME} says {num_tokens} tokens "
                f"x {self.dtype.itemsize} bytes = {expected_bytes}: it is truncated or was replaced. {fix}"
            )
        if verify and sha256_file(path) != sha256:
            raise DataError(f"shard {path} is corrupt: its sha256 differs from the one in {MANIFEST_NAME}. {fix}")
        tokens = np.memmap(path, dtype=self.dtype, mode="r")  # (num_tokens,)
        if verify and int(tokens.max()) >= self.vocab_size:
            raise DataError(
                f"shard {path} holds token id {int(tokens.max())}, but the tokenizer has {self.vocab_size} ids: "
                f"the shard was made with another tokenizer. {fix}"
            )
        return tokens

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens [start, start + length) of the split, across shard boundaries, as int64 (length,)."""
        if start < 0 or length < 1 or start + length > len(self):
            raise IndexError(
                f"tokens [{start}, {start + length}) are outside the {self.split} split of {len(self)} tokens"
            )
        pieces = []
        shard_index = int(np.searchsorted(self.offsets, start, side="right")) - 1
        while length > 0:
            local_start = start - int(self.offsets[shard_index])
            piece = self.shards[shard_index][local_start : local_start + length]
            pieces.append(piece)
            start, length, shard_index = start + len(piece), length - len(piece), shard_index + 1
        return np.concatenate(pieces).astype(np.int64)


def count_windows(shards: TokenShards, seq_len: int, num_needed: int) -> int:
    """Windows of seq_len + 1 tokens starting at multiples of seq_len; errors if fewer than num_needed."""
    num_windows = (len(shards) - 1) // seq_len
    if num_windows < num_needed:
        raise DataError(
            f"the {shards.split} split of {shards.data_dir} has {len(shards):,} tokens, too few for "
            f"{num_needed} windows of {seq_len + 1} tokens. Lower the batch size or sequence length, "
            "or prepare more data."
        )
    return num_windows


def windows_to_batch(shards: TokenShards, windows: Iterable[int], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    stacked = np.stack([shards.read(int(window) * seq_len, seq_len + 1) for window in windows])  # (B, T + 1) int64
    rows = torch.from_numpy(stacked)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()  # input_ids, labels: (B, T) int64 each


class TokenBatches:
    """Endless shuffled training batches (input_ids, labels), int64 tensors of shape (batch_size, seq_len).

    The split is cut into windows of seq_len + 1 tokens that start at multiples of seq_len, so that
    each token is a label once per epoch; labels are the inputs shifted by one. Epoch e visits the
    windows in a permutation seeded by (seed, e), in global batches of batch_size * world_size
    windows, dropping the incomplete last one. Rank r takes windows [r * batch_size, (r + 1) *
    batch_size) of each global batch, so world_size processes together see exactly the batches of
    one process with batch_size * world_size. load_state_dict(state_dict()) resumes at the very
    batch that would have come next.
    """

    def __init__(
        self, shards: TokenShards, batch_size: int, seq_len: int, seed: int = 0, rank: int = 0, world_size: int = 1
    ):
        if batch_size < 1 or seq_len < 1 or seed < 0 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1, seq_len >= 1, seed >= 0 and 0 <= rank < world_size; got "
                f"{batch_size}, {seq_len}, {seed}, {rank}, {world_size}"
            )
        self.shards, self.batch_size, self.seq_len, self.seed, self.rank = shards, batch_size, seq_len, seed, rank
        self.global_batch_size = batch_size * world_size
        self.num_windows = count_windows(shards, seq_len, self.global_batch_size)
        self.batches_per_epoch = self.num_windows // self.global_batch_size
        self.epoch = 0  # epoch of the next batch
        self.step = 0  # global batches already produced in this epoch
        self._order_epoch: int | None = None  # the cached window permutation of one epoch
        self._order: np.ndarray | None = None

    def _epoch_order(self) -> np.ndarray:
        if self._order is None or self._order_epoch != self.epoch:
            self._order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_windows)
            self._order_epoch = self.epoch
        return self._order

    def __iter__(self) -> "TokenBatches":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        first = self.step * self.global_batch_size + self.rank * self.batch_size
        windows = self._epoch_order()[first : first + self.batch_size]
        self.step += 1
        if self.step == self.batches_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0
        return windows_to_batch(self.shards, windows, self.seq_len)

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "global_batch_size": self.global_batch_size,
            "num_windows": self.num_windows,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "seq_len", "global_batch_size", "num_windows"):
            if state[key] != getattr(self, key):
                raise DataError(
                    f"cannot resume the batches: the saved state has {key}={state[key]}, this run has "
                    f"{getattr(self, key)}. Resume with the same data, seed, seq_len and global batch size."
                )
        self.epoch, self.step = state["epoch"], state["step"]


def count_eval_batches(shards: TokenShards, batch_size: int, seq_len: int) -> int:
    """How many batches `eval_batches` gives with no max_batches: every window, batch_size at a time."""
    return -(-count_windows(shards, seq_len, 1) // batch_size)


def eval_batches(
    shards: TokenShards, batch_size: int, seq_len: int, max_batches: int | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every window of seq_len + 1 tokens (inputs not overlapping) in order, in batches of batch_size
    (the last may be smaller), at most max_batches of them: the same batches on every call."""
    num_windows = count_windows(shards, seq_len, 1)
    firsts = range(0, num_windows, batch_size)[:max_batches]
    for first in firsts:
        yield windows_to_batch(shards, range(first, min(first + batch_size, num_windows)), seq_len)
