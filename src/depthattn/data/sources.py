"""Read documents from the supported inputs.

What one document is, per input:
- `embedded` (the default): one part of a work of the embedded Shakespeare corpus (corpus/README.md).
- `FILE.txt`: UTF-8 text cut at blank lines into chunks of about `chunk_chars` characters, each
  stripped of surrounding whitespace; a file shorter than that is one document.
- `FILE.jsonl`: one JSON object per line; the document is its string field `text_field`.
- `FILE.parquet`: one row per document; the string column `text_field` (needs pyarrow).
- `hf:NAME` or `hf:NAME:CONFIG`: one row per document of split `hf_split` of a Hugging Face
  dataset, column `text_field` (needs the `datasets` library and the dataset in reach).
Blank documents are skipped; an input that yields no document at all is an error.
"""

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .corpus import embedded_corpus_documents
from .errors import DataError

EMBEDDED = "embedded"
HF_PREFIX = "hf:"
FILE_KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
DEFAULT_CHUNK_CHARS = 25_000


@dataclass(frozen=True)
class Source:
    kind: str  # "embedded", "txt", "jsonl", "parquet" or "hf"
    location: str  # the file path or dataset name as given


def resolve_sources(inputs: Sequence[str | os.PathLike] | str | os.PathLike) -> list[Source]:
    """Check every input up front (files exist and have a known type); no input means `embedded`."""
    if isinstance(inputs, (str, os.PathLike)):  # one input given bare instead of in a list
        inputs = [inputs]
    sources = []
    for item in list(inputs) or [EMBEDDED]:
        item = str(item)
        if item == EMBEDDED:
            sources.append(Source("embedded", item))
        elif item.startswith(HF_PREFIX):
            sources.append(Source("hf", item[len(HF_PREFIX) :]))
        else:
            path = Path(item)
            if not path.exists():
                raise DataError(
                    f"input file not found: {path}. Check the path; for a Hugging Face dataset write "
                    f"hf:NAME, for the built-in corpus write {EMBEDDED}."
                )
            if path.is_dir():
                raise DataError(f"input {path} is a directory. Pass its files instead, e.g. {path}/*.jsonl.")
            if path.suffix.lower() not in FILE_KINDS:
                raise DataError(
                    f"unsupported input file type: {path}. Use .txt (plain text), .jsonl (one JSON object "
                    "per line) or .parquet."
                )
            sources.append(Source(FILE_KINDS[path.suffix.lower()], item))
    return sources


def describe_sources(sources: Sequence[Source]) -> list[str]:
    return [source.location if source.kind != "hf" else HF_PREFIX + source.location for source in sources]


def iter_documents(
    sources: Sequence[Source], text_field: str = "text", hf_split: str = "train", chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> Iterator[str]:
    """Yield every non-blank document of every source, in order."""
    for source in sources:
        num_documents = 0
        for text in read_source(source, text_field, hf_split, chunk_chars):
            if text.strip():
                num_documents += 1
                yield text
        if num_documents == 0:
            name = describe_sources([source])[0]
            raise DataError(
                f"input {name} contains no documents (it is empty or all its text is blank). Fix it or leave it out."
            )


def read_source(source: Source, text_field: str, hf_split: str, chunk_chars: int) -> Iterator[str]:
    if source.kind == "embedded":
        return embedded_corpus_documents()
    if source.kind == "txt":
        return read_text_file(Path(source.location), chunk_chars)
    if source.kind == "jsonl":
        return read_jsonl(Path(source.location), text_field)
    if source.kind == "parquet":
        return read_parquet(Path(source.location), text_field)
    return read_hf_dataset(source.location, hf_split, text_field)


def split_into_chunks(text: str, chunk_chars: int) -> list[str]:
    """Cut `text` at blank lines into about len(text) / chunk_chars pieces of similar size (stripped, non-empty)."""
    num_chunks = max(1, round(len(text) / chunk_chars))
    cuts = [0]
    for k in range(1, num_chunks):
        cut = text.find("\n\n", len(text) * k // num_chunks)  # first blank line after the even cut point
        cuts.append(len(text) if cut == -1 else cut)
    cuts.append(len(text))
    chunks = [text[start:end].strip() for start, end in zip(cuts, cuts[1:])]
    return [chunk for chunk in chunks if chunk]


def decode_utf8(data: bytes, path: Path, base_offset: int = 0, where: str = "") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path}{where}: invalid UTF-8 at byte offset {base_offset + error.start} "
            f"(byte 0x{data[error.start]:02x}). Convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8."
        ) from None


def read_text_file(path: Path, chunk_chars: int) -> Iterator[str]:
    text = decode_utf8(path.read_bytes(), path).removeprefix("\ufeff").replace("\r\n", "\n")
    yield from split_into_chunks(text, chunk_chars)


def read_jsonl(path: Path, text_field: str) -> Iterator[str]:
    offset = 0  # byte offset of the current line in the file
    with open(path, "rb") as file:
        for line_number, line in enumerate(file, start=1):
            where = f", line {line_number}"
            line_text = decode_utf8(line, path, offset, where)
            offset += len(line)
            if not line_text.strip():
                continue
            try:
                record = json.loads(line_text)
            except json.JSONDecodeError as error:
                raise DataError(
                    f"{path}{where}: not valid JSON ({error.msg}, column {error.colno}). "
                    f'Each line must be one JSON object such as {{"{text_field}": "..."}}.'
                ) from None
            if not isinstance(record, dict) or text_field not in record:
                found = ", ".join(map(repr, record)) if isinstance(record, dict) else f"a JSON {type(record).__name__}"
                raise DataError(
                    f"{path}{where}: no field {text_field!r} (found {found or 'no fields'}). "
                    "Name the field that holds the text with --text-field."
                )
            text = record[text_field]
            if not isinstance(text, str):
                raise DataError(
                    f"{path}{where}: field {text_field!r} holds a {type(text).__name__}, not a string. Fix the line."
                )
            yield text


def read_parquet(path: Path, text_field: str) -> Iterator[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"reading {path} needs pyarrow, which is not installed: pip install depthattn[parquet]"
        ) from None
    try:
        parquet_file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path}: not a readable Parquet file ({error}). Check that the file is complete.") from None
    schema = parquet_file.schema_arrow
    if text_field not in schema.names:
        raise DataError(
            f"{path}: no column {text_field!r} (columns: {', '.join(schema.names)}). "
            "Pass the text column with --text-field."
        )
    column_type = schema.field(text_field).type
    if column_type not in (pa.string(), pa.large_string()):
        raise DataError(
            f"{path}: column {text_field!r} has type {column_type}, not string. "
            "Store the text as a UTF-8 string column."
        )
    for batch in parquet_file.iter_batches(batch_size=1024, columns=[text_field]):
        yield from (text for text in batch.column(0).to_pylist() if text is not None)


def read_hf_dataset(name: str, split: str, text_field: str) -> Iterator[str]:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"input hf:{name} needs the `datasets` library, which is not installed: pip install depthattn[datasets]"
        ) from None
    path, _, config = name.partition(":")
    try:
        dataset = datasets.load_dataset(path, config or None, split=split)
    except Exception as error:  # the hub, the cache and the dataset scripts raise many kinds
        raise DataError(
            f"could not load Hugging Face dataset hf:{name} (split {split!r}): {error}. Check the name, the split, "
            "and the network or the local cache (HF_DATASETS_OFFLINE=1 reads the cache only)."
        ) from error
    if text_field not in dataset.column_names:
        raise DataError(
            f"hf:{name}: no column {text_field!r} (columns: {', '.join(dataset.column_names)}). "
            "Pass the text column with --text-field."
        )
    for batch in dataset.iter(batch_size=1024):
        for text in batch[text_field]:
            if not isinstance(text, (str, type(None))):
                raise DataError(
                    f"hf:{name}: column {text_field!r} holds {type(text).__name__} values, not strings. "
                    "Pick a text column with --text-field."
                )
            if text is not None:
                yield text
