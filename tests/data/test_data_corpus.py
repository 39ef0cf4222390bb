"""The embedded corpus and the tools that built it."""

import lzma

import pytest

from depthattn.data import DataError, embedded_corpus_documents, embedded_corpus_path, embedded_corpus_records
from depthattn.data.build_corpus import clean_text, strip_gutenberg_boilerplate
from depthattn.data.sources import split_into_chunks


def test_embedded_corpus_has_expected_documents_and_size():
    records = list(embedded_corpus_records())
    assert len(records) == 205
    assert len({record["title"] for record in records}) == 42
    assert sum(len(record["text"]) for record in records) == 5_053_533
    assert embedded_corpus_path().stat().st_size < 2_500_000
    assert list(embedded_corpus_documents()) == [record["text"] for record in records]
    sizes = [len(record["text"]) for record in records]
    assert min(sizes) > 2_000 and max(sizes) < 30_000


def test_embedded_corpus_parts_are_in_order_and_free_of_gutenberg_text():
    records = list(embedded_corpus_records())
    hamlet = [record for record in records if record["title"] == "Hamlet"]
    assert [record["part"] for record in hamlet] == list(range(1, hamlet[0]["num_parts"] + 1))
    assert hamlet[0]["text"].startswith("HAMLET, PRINCE OF DENMARK")
    assert "the rest is silence" in hamlet[-1]["text"]
    with lzma.open(embedded_corpus_path(), "rt", encoding="utf-8") as file:
        assert "gutenberg" not in file.read().lower()


def test_split_into_chunks_cuts_at_blank_lines_into_similar_sizes():
    paragraphs = [f"Paragraph {i}.\nIts second line." for i in range(100)]
    text = "\n\n".join(paragraphs)
    chunks = split_into_chunks(text, chunk_chars=300)
    assert len(chunks) == round(len(text) / 300)
    assert "\n\n".join(chunks) == text  # nothing lost, cut only between paragraphs
    assert max(map(len, chunks)) < 2 * min(map(len, chunks))
    assert split_into_chunks("  short text \n", chunk_chars=300) == ["short text"]
    assert split_into_chunks("one very long line " * 100, chunk_chars=10) == [("one very long line " * 100).strip()]


def test_gutenberg_header_and_footer_are_cut():
    raw = (
        "The Project Gutenberg EBook of Hamlet\r\n\r\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\n"
        "HAMLET   \r\n\r\nTo be, or not to be.\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\nLicence text.\r\n"
    )
    assert clean_text(raw, "hamlet.txt") == "HAMLET\n\nTo be, or not to be."
    with pytest.raises(DataError, match="macbeth.txt: Project Gutenberg text is left"):
        strip_gutenberg_boilerplate("Produced by Project Gutenberg volunteers\n\nMACBETH", "macbeth.txt")
