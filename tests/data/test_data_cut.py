"""Long documents cut into pieces before the split, and the limit lowered until a single text splits."""

import argparse
import json
import re

import pytest

from depthattn.commands.prepare import add_arguments, run
from depthattn.data import DataError, TokenShards, document_split, embedded_corpus_documents, prepare
from depthattn.data.document_limit import MIN_PIECE_CHARS, choose_max_document_chars
from depthattn.data.sources import (
    DEFAULT_MAX_DOCUMENT_CHARS,
    CutStats,
    cut_document,
    iter_documents,
    numbered_documents,
    resolve_sources,
)
from depthattn.train import TrainConfig, train
from tests.data.data_helpers import write_jsonl


@pytest.fixture(scope="module")
def book() -> str:
    """20,000 characters of one play: a text too short to split into train and val as one document."""
    return next(embedded_corpus_documents())[:20_000]


def prepare_cli(*args: str) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return run(parser.parse_args([*args, "--workers", "1"]))


def test_a_short_document_stays_as_it_is():
    text = "  a short text, with its whitespace \n\n"
    assert cut_document(text, 100) == [text]


def test_a_long_document_is_cut_at_paragraph_ends_into_even_pieces():
    paragraphs = [f"Paragraph {i} of the story.\nIts second line." for i in range(200)]
    text = "\n\n".join(paragraphs)
    pieces = cut_document(text, 1000)
    assert len(pieces) == -(-len(text) // 1000) and max(map(len, pieces)) <= 1000
    assert min(map(len, pieces)) > 1000 // 2
    assert "\n\n".join(pieces) == text  # nothing lost, cut only between paragraphs


def test_without_paragraphs_cuts_fall_at_line_ends_then_spaces_then_anywhere():
    lines = "\n".join(f"line {i} of a poem" for i in range(300))
    assert all(piece.startswith("line ") for piece in cut_document(lines, 500))
    words = " ".join(f"word{i}" for i in range(1000))
    assert " ".join(cut_document(words, 700)) == words
    letters = "x" * 10_001
    pieces = cut_document(letters, 1000)
    assert "".join(pieces) == letters and len(pieces) == 11 and max(map(len, pieces)) <= 1000


def test_a_huge_single_document_yields_pieces(tmp_path, prepared_dir):
    huge = "\n\n".join(f"Paragraph {i}: " + "some words " * 40 for i in range(2000))  # 915 KB, one document
    docs = write_jsonl(tmp_path / "huge.jsonl", [huge])
    manifest = prepare([str(docs)], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", progress=False)
    pieces = cut_document(huge, DEFAULT_MAX_DOCUMENT_CHARS)
    assert len(pieces) == 29 and max(map(len, pieces)) <= DEFAULT_MAX_DOCUMENT_CHARS
    assert manifest["document_cut"] == {"max_chars": DEFAULT_MAX_DOCUMENT_CHARS,
                                        "max_chars_requested": DEFAULT_MAX_DOCUMENT_CHARS, "num_documents_cut": 1,
                                        "num_pieces": 29}
    splits = manifest["splits"]
    assert splits["train"]["num_documents"] + splits["val"]["num_documents"] == 29
    assert splits["val"]["num_documents"] == sum(document_split(p, 1337, 0.05) == "val" for p in pieces) == 2


def test_one_text_file_prepares_with_a_val_split(tmp_path, book, capsys):
    (tmp_path / "book.txt").write_text(book)
    out = tmp_path / "data"
    assert prepare_cli("--input", str(tmp_path / "book.txt"), "--out", str(out), "--vocab-size", "300") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    cut = manifest["document_cut"]
    assert cut["max_chars_requested"] == DEFAULT_MAX_DOCUMENT_CHARS and cut["max_chars"] < DEFAULT_MAX_DOCUMENT_CHARS
    assert cut["num_documents_cut"] == 1 and cut["num_pieces"] >= 2 / manifest["val_fraction"]
    assert manifest["splits"]["val"]["num_documents"] > 0
    assert "so that both splits get documents" in capsys.readouterr().out


def test_the_report_says_how_text_files_were_chunked_and_documents_cut_in_the_right_plurals(tmp_path, book, capsys):
    (tmp_path / "book.txt").write_text(book * 3)  # 60,000 characters: 2 chunks of about 25,000
    assert prepare_cli("--input", str(tmp_path / "book.txt"), "--out", str(tmp_path / "a"), "--vocab-size", "300") == 0
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["text_chunks"] == {"num_files_cut": 1, "num_documents": 2}
    cut = manifest["document_cut"]
    assert cut["num_documents_cut"] == 2 and cut["max_chars"] < DEFAULT_MAX_DOCUMENT_CHARS
    report = capsys.readouterr().out
    assert "cut 1 text file at blank lines into 2 documents of about 25,000 characters (--chunk-chars)" in report
    assert (f"cut 2 documents longer than {cut['max_chars']:,} characters into {cut['num_pieces']} pieces "
            f"(--max-document-chars {cut['max_chars']:,}, lowered from 32,768 so that both splits get documents)"
            in report)
    (tmp_path / "short.txt").write_text(book)  # one chunk: nothing to say about --chunk-chars
    assert prepare_cli("--input", str(tmp_path / "short.txt"), "--out", str(tmp_path / "b"), "--vocab-size", "300",
                       "--val-fraction", "0.5") == 0
    report = capsys.readouterr().out
    assert "--chunk-chars" not in report
    assert re.search(r"val: 1 document, [\d,]+ tokens, 1 shard\n", report)
    assert not re.search(r"\b1 (documents|tokens|shards|pieces)\b", report)


def test_a_folder_of_one_file_prepares_too(tmp_path, book, prepared_dir):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "only.txt").write_text(book)
    manifest = prepare([tmp_path / "texts"], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", progress=False)
    assert manifest["splits"]["val"]["num_documents"] > 0 and manifest["splits"]["train"]["num_documents"] > 0


def test_training_runs_on_a_single_prepared_text(tmp_path, book):
    (tmp_path / "book.txt").write_text(book * 3)  # one file, one document: cut, split, trained on, evaluated
    prepare(tmp_path / "book.txt", tmp_path / "data", vocab_size=300, progress=False)
    config = TrainConfig.load(None, [
        "--data.path", str(tmp_path / "data"), "--data.seq_len", "32", "--train.out_dir", str(tmp_path / "run"),
        "--train.batch_size", "2", "--train.steps", "3", "--train.eval_every", "3", "--train.eval_batches", "1",
        "--train.progress", "false", "--optim.warmup_steps", "1",
    ])
    summary = train(config)
    assert summary["val_loss"] > 0 and (tmp_path / "run" / "final").is_dir()


def test_inputs_that_split_keep_their_documents(tmp_path, prepared_dir, small_docs):
    """The embedded corpus (and so the study's datasets) and any input that split before are not cut."""
    embedded = list(embedded_corpus_documents())
    assert max(map(len, embedded)) < DEFAULT_MAX_DOCUMENT_CHARS
    cuts = CutStats()
    assert [text for _, _, text in numbered_documents(resolve_sources([]), cuts=cuts)] == embedded
    assert cuts == CutStats(documents=0, pieces=0, longest=max(map(len, embedded)))
    assert [document_split(text, 1337, 0.05) for text in embedded].count("val") == 9  # as committed
    val = TokenShards(prepared_dir, "val")  # small_docs, prepared by the conftest fixture
    assert val.num_documents == sum(document_split(doc, 1337, 0.2) == "val" for doc in small_docs)
    assert list(iter_documents(resolve_sources([str(write_jsonl(tmp_path / "d.jsonl", small_docs))]))) == small_docs


def test_the_limit_is_halved_only_as_far_as_needed(book):
    def documents(limit, cuts):
        return numbered_documents(resolve_sources(["embedded"]), max_document_chars=limit, cuts=cuts)

    assert choose_max_document_chars(documents, 1337, 0.05, DEFAULT_MAX_DOCUMENT_CHARS) == DEFAULT_MAX_DOCUMENT_CHARS

    def one_book(limit, cuts):
        pieces = cut_document(book, limit)
        cuts.longest = len(book)
        return (("book", number, piece) for number, piece in enumerate(pieces, 1))

    # 1,024 is the first limit to give both splits a document, with 25 pieces; 512 would give 47 (2 / 0.05 = 40
    # are wanted) but none in val, so 1,024 it is
    assert choose_max_document_chars(one_book, 1337, 0.05, DEFAULT_MAX_DOCUMENT_CHARS) == 1024
    assert {document_split(piece, 1337, 0.05) for piece in cut_document(book, 1024)} == {"train", "val"}
    assert len(cut_document(book, 1024)) == 25 and len(cut_document(book, MIN_PIECE_CHARS)) == 47
    assert {document_split(piece, 1337, 0.05) for piece in cut_document(book, MIN_PIECE_CHARS)} == {"train"}


def test_too_little_text_names_a_fix_that_works(tmp_path, prepared_dir):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("A single short line.")
    with pytest.raises(DataError, match=r"the val split got none of the 1 documents .*Give more text\.$"):
        prepare(tiny, tmp_path / "out", tokenizer=prepared_dir / "tokenizer", progress=False)
    docs = write_jsonl(tmp_path / "docs.jsonl", ["one document", "another document", "a third document"])
    with pytest.raises(DataError, match=r"the val split got none of the 3 documents") as raised:
        prepare([str(docs)], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", val_fraction=0.01, progress=False)
    suggested = float(str(raised.value).split("--val-fraction ")[1].split()[0])
    manifest = prepare([str(docs)], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", val_fraction=suggested,
                       progress=False)
    assert all(split["num_documents"] > 0 for split in manifest["splits"].values())
