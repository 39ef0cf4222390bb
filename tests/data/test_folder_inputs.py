"""A folder as an input: files whose extension names no format (GPL-3, Apache-2.0, notes.html) are read by content,
and files that cannot be read are skipped with a note each, where a file given by name is an error."""

from pathlib import Path

import pytest

from depthattn.data import DataError, prepare
from depthattn.data.sources import READ_BYTES, iter_documents, resolve_sources

LICENSES = Path("/usr/share/common-licenses")


def licence_folder(tmp_path):
    folder = tmp_path / "licenses"
    folder.mkdir()
    (folder / "Apache-2.0").write_text("Apache License\nVersion 2.0\n")
    (folder / "GPL-3").write_text("GNU GENERAL PUBLIC LICENSE\nVersion 3\n")
    (folder / "notes.html").write_text("<p>notes</p>\n")
    (folder / "empty").write_text("")
    (folder / "logo.2").write_bytes(bytes(range(256)))  # not UTF-8
    return folder


def test_blank_text_files_and_others_not_utf8_are_skipped_in_a_folder(tmp_path, capsys):
    folder = licence_folder(tmp_path)
    (folder / "blank.txt").write_text("  \n\n ")
    (folder / "LATIN1").write_bytes("caf\u00e9\n".encode("latin-1"))
    (folder / "late.txt").write_bytes(b"fine\n" * (READ_BYTES // 4) + "caf\u00e9\n".encode("latin-1"))  # past 1 piece
    documents = list(iter_documents(resolve_sources([folder])))
    assert documents == ["Apache License\nVersion 2.0", "GNU GENERAL PUBLIC LICENSE\nVersion 3", "<p>notes</p>"]
    err = capsys.readouterr().err
    assert f"note: skipped {folder / 'blank.txt'}: empty (only blank text)" in err
    assert f"note: skipped {folder / 'LATIN1'}: not UTF-8 text" in err and "skipped 5 of the 8 files" in err
    assert f"note: skipped {folder / 'late.txt'}: not UTF-8 text" in err


def test_a_jsonl_file_may_start_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "first"}\n{"text": "second"}\n')
    assert list(iter_documents(resolve_sources([path]))) == ["first", "second"]


def test_a_folder_reads_files_by_content_and_skips_the_unreadable_with_a_note(tmp_path, capsys):
    folder = licence_folder(tmp_path)
    documents = list(iter_documents(resolve_sources([folder])))
    assert documents == ["Apache License\nVersion 2.0", "GNU GENERAL PUBLIC LICENSE\nVersion 3", "<p>notes</p>"]
    notes = capsys.readouterr().err.splitlines()
    assert notes == [f"note: skipped {folder / 'empty'}: empty",
                     f"note: skipped {folder / 'logo.2'}: not UTF-8 text, JSONL or Parquet (convert a text file "
                     "to UTF-8, e.g. iconv -f latin1 -t utf-8)",
                     f"note: skipped 2 of the 5 files in {folder}"]


def test_a_file_given_by_name_that_cannot_be_read_is_still_an_error(tmp_path):
    folder = licence_folder(tmp_path)
    with pytest.raises(DataError, match="unsupported input file type: .*logo.2. Use text"):
        resolve_sources([folder / "logo.2"])
    with pytest.raises(DataError, match="contains no documents"):
        list(iter_documents(resolve_sources([folder / "empty"])))


def test_a_folder_with_nothing_readable_is_an_error(tmp_path):
    folder = licence_folder(tmp_path)
    for name in ("Apache-2.0", "GPL-3", "notes.html"):
        (folder / name).unlink()
    with pytest.raises(DataError, match=f"input folder {folder} holds no readable file .*Add UTF-8 text"):
        resolve_sources([folder])


@pytest.mark.skipif(not LICENSES.is_dir(), reason="needs /usr/share/common-licenses (Debian, Ubuntu)")
def test_prepare_reads_the_common_licenses_folder(tmp_path):
    manifest = prepare([str(LICENSES)], tmp_path / "licenses", vocab_size=300, progress=False)
    assert len(manifest["source"]) >= 10 and manifest["splits"]["val"]["num_documents"] >= 1


def test_json_compressed_and_utf16_files_get_the_fix_that_works(tmp_path, capsys):
    """A .json of JSON Lines was read in a folder as text (its markup trained on), and by name advised "give the
    folder"; a UTF-16 file (Windows' "Unicode") was advised iconv from latin1, which gives text full of NULs."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "good.txt").write_text("A good line of text.")
    (folder / "train.json").write_text('{"text": "a document"}\n')
    (folder / "train.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00 compressed")
    (folder / "notepad.txt").write_bytes("Unicode text".encode("utf-16"))
    assert list(iter_documents(resolve_sources([folder]))) == ["A good line of text."]
    err = capsys.readouterr().err
    assert f"skipped {folder / 'train.json'}: If it holds one JSON object per line, rename it to .jsonl" in err
    assert f"skipped {folder / 'train.jsonl.gz'}: Decompress it first" in err
    assert f"skipped {folder / 'notepad.txt'}: not UTF-8 text, JSONL or Parquet (convert a text file to UTF-8, " \
        "e.g. iconv -f utf-16 -t utf-8)" in err
    with pytest.raises(DataError, match="train.json. If it holds one JSON object per line, rename it to .jsonl"):
        resolve_sources([folder / "train.json"])
    with pytest.raises(DataError, match="iconv -f utf-16 -t utf-8 .it starts with UTF-16's byte order mark"):
        list(iter_documents(resolve_sources([folder / "notepad.txt"])))


def test_a_parquet_text_column_of_any_string_layout_is_read(tmp_path):
    """A pandas category column (dictionary-encoded) and Arrow's string view are UTF-8 strings too."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    texts = ["first document", "second document", "first document"]
    for name, column in (("dictionary", pa.array(texts).dictionary_encode()),
                         ("view", pa.array(texts, type=pa.string_view()))):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"text": column}), path)
        assert list(iter_documents(resolve_sources([path]))) == texts, name


def test_an_empty_jsonl_or_parquet_part_in_a_folder_is_skipped_as_a_blank_text_file_is(tmp_path, capsys):
    """A Parquet part of no rows (a dataset's last shard, often) stopped the whole folder's prepare."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["a document"]}), folder / "part-0.parquet")
    pq.write_table(pa.table({"text": pa.array([], type=pa.string())}), folder / "part-1.parquet")
    (folder / "blank.jsonl").write_text("\n  \n")
    assert list(iter_documents(resolve_sources([folder]))) == ["a document"]
    err = capsys.readouterr().err
    assert f"skipped {folder / 'part-1.parquet'}: empty (no rows)" in err
    assert f"skipped {folder / 'blank.jsonl'}: empty (only blank lines)" in err
