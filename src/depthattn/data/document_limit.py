"""How long a document may be before `prepare` cuts it, so that the seeded split gives both train and val some.

prepare cuts every document longer than `max_document_chars` into pieces (sources.cut_document) before the
seeded train/val assignment. Whenever both splits get a document with that limit, it is used: an input that
splits keeps its documents. Otherwise (a single short text, say) the limit is halved, again and again down to
MIN_PIECE_CHARS, until both splits get a document and the documents number at least 2 / val_fraction, so that
about two or more go to val and its share of the text is near val_fraction; if no limit gives that many, the
smallest with which both splits get a document is used. A limit that would cut nothing more than the one before
is passed over (it gives the same documents). If no limit works, the input is too small for `val_fraction`: the
error names a --val-fraction that works with the smallest pieces, where one does.
"""

import math
from collections.abc import Callable, Iterable

from .encode import placed_split, split_key, split_text
from .errors import DataError
from .manifest import SPLITS
from .sources import CutStats

MIN_PIECE_CHARS = 512

# max_document_chars -> the (input, number, text[, split_by]) of the documents cut with it, cutting counted in the
# CutStats
DocumentsWithLimit = Callable[[int, CutStats], Iterable[tuple]]


def choose_max_document_chars(documents: DocumentsWithLimit, seed: int, val_fraction: float, requested: int) -> int:
    """The limit to cut documents at (the module docstring says which). Reads the documents until a limit is
    known to work, and all of them for one that does not."""
    limit, wanted = requested, 1  # documents wanted: any number at the requested limit
    usable = None  # the last lowered limit with which both splits got a document
    while True:
        cuts = CutStats()
        both_splits, num_documents = split_tally(documents(limit, cuts), seed, val_fraction, wanted)
        if both_splits and num_documents >= wanted:
            return limit
        usable = limit if both_splits else usable
        cutting_more = [smaller for smaller in halvings(requested) if smaller < min(limit, cuts.longest)]
        if not cutting_more:
            if usable is not None:
                return usable
            raise too_small(documents(limit, CutStats()), seed, val_fraction, limit, cuts.documents > 0)
        limit, wanted = cutting_more[0], math.ceil(2 / val_fraction)


def halvings(requested: int) -> list[int]:
    """requested, then its halves while they are at least MIN_PIECE_CHARS."""
    limits = [requested]
    while limits[-1] // 2 >= MIN_PIECE_CHARS:
        limits.append(limits[-1] // 2)
    return limits


def split_tally(documents: Iterable[tuple], seed: int, val_fraction: float,
                enough: int) -> tuple[bool, int]:
    """Whether both splits get a document, and how many documents there are: read until both splits have one
    and there are `enough`, else to the end."""
    found, num_documents = set(), 0
    for document in documents:
        found.add(placed_split(document, seed, val_fraction))
        num_documents += 1
        if len(found) == len(SPLITS) and num_documents >= enough:
            break
    return len(found) == len(SPLITS), num_documents


def too_small(documents: Iterable[tuple], seed: int, val_fraction: float, limit: int,
              cut: bool) -> DataError:
    """The error for documents of which one split gets none, naming a val_fraction that splits them if any does."""
    keys = sorted(split_key(split_text(document), seed) for document in documents)
    empty = "val" if keys[0] >= val_fraction * 2**64 else "train"
    working = fraction_between(keys[0], keys[-1], upward=empty == "val")
    cutting = f", even with documents longer than {limit} characters cut into pieces" if cut else ""
    fix = f"Pass --val-fraction {working} (with it both splits get documents), or give" if working else "Give"
    return DataError(
        f"the {empty} split got none of the {len(keys)} documents (val_fraction {val_fraction}){cutting}: too "
        f"little text to hold out a validation split. {fix} more text."
    )


def fraction_between(low: int, high: int, upward: bool) -> float | None:
    """The shortest decimal f with low < f * 2**64 <= high: with it, the document of split key `low` goes to val
    and that of `high` to train. The smallest such f if `upward`, else the largest; None if there is none."""
    for digits in range(1, 18):
        scale = 10**digits
        f = (math.floor(low * scale / 2**64) + 1) / scale if upward else math.floor(high * scale / 2**64) / scale
        if low < f * 2**64 <= high:
            return f
    return None
