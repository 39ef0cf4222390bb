"""Every bad input raises a DataError that names the file and the problem."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from depthattn.data import DataError, TokenShards, document_split, prepare
from depthattn.data.prepare import refuse_output_inside_input
from depthattn.data.sources import describe_sources, iter_documents, resolve_sources
from tests.data.data_helpers import write_jsonl


def read_all(*inputs, **options):
    return list(iter_documents(resolve_sources([str(item) for item in inputs]), **options))


def test_missing_input_file_and_wrong_kinds_of_path(tmp_path):
    with pytest.raises(DataError, match="input file not found: .*missing.jsonl.*hf:NAME"):
        prepare([str(tmp_path / "missing.jsonl")], tmp_path / "out", progress=False)
    with pytest.raises(DataError, match=f"input folder {tmp_path} holds no files"):
        read_all(tmp_path)
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="unsupported input file type: .*data.csv.*Use text"):
        read_all(tmp_path / "data.csv")
    assert read_all(tmp_path) == ["a,b"]  # in a folder a file of no known format is read as text where it is


@pytest.mark.parametrize("out", [".", "data"])
def test_an_output_inside_an_input_folder_is_refused(tmp_path, out):
    """A dataset there would be read as text the next time the folder is prepared (--overwrite)."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("some text\n")
    with pytest.raises(DataError, match=f"--out {folder / out} is inside the input folder {folder}"):
        prepare([str(folder)], folder / out, progress=False)
    assert sorted(path.name for path in folder.iterdir()) == ["a.txt"]  # nothing written


def test_a_folder_named_like_a_corpus_is_not_the_corpus(tmp_path, monkeypatch, capsys):
    """--input embedded reads the built-in corpus: a folder ./embedded here neither blocks an --out inside it nor
    is read; a note says how to name the folder."""
    from depthattn.data.sources import EMBEDDED

    monkeypatch.chdir(tmp_path)
    (tmp_path / "embedded").mkdir()
    (tmp_path / "embedded" / "mine.txt").write_text("my own text\n")
    assert [source.kind for source in resolve_sources([EMBEDDED])] == ["embedded"]
    assert "note: --input embedded reads the embedded corpus, not the folder embedded here: write ./embedded" in \
        capsys.readouterr().err
    refuse_output_inside_input(Path("embedded/prepared"), [EMBEDDED])  # the corpus is no folder here
    with pytest.raises(DataError, match="is inside the input folder embedded"):
        refuse_output_inside_input(Path("embedded/prepared"), ["./embedded"])


def test_a_folder_is_its_files_in_sorted_order_and_a_file_without_extension_is_text(tmp_path):
    folder = tmp_path / "texts"
    (folder / "b").mkdir(parents=True)
    (folder / "LICENSE").write_text("the licence")
    (folder / "b" / "notes.md").write_text("some notes")
    (folder / "a.jsonl").write_text('{"text": "a json document"}\n')
    (folder / ".hidden").write_text("never read")
    assert read_all(folder) == ["the licence", "a json document", "some notes"]  # LICENSE, a.jsonl, b/notes.md
    # what the manifest records as the dataset's source: each file
    assert describe_sources(resolve_sources([str(folder)])) == [
        str(folder / "LICENSE"), str(folder / "a.jsonl"), str(folder / "b" / "notes.md")]


@pytest.mark.parametrize(
    "name, content",
    [("empty.txt", ""), ("blank.txt", " \n\n\t\n"), ("empty.jsonl", ""), ("blank.jsonl", '\n{"text": "  "}\n\n')],
)
def test_input_without_documents(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=f"input .*{name} contains no documents"):
        read_all(tmp_path / name)


def test_undecodable_text_names_file_and_byte_offset(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("fine text\ncaf\u00e9".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.txt: invalid UTF-8 at byte offset 13 \(byte 0xe9\).*iconv"):
        read_all(tmp_path / "latin1.txt")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match="latin1.jsonl, line 3: invalid UTF-8 at byte offset 43"):
        read_all(tmp_path / "latin1.jsonl")


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"text": "unterminated', "line 2: not valid JSON"),
        ('{"body": "x"}', "line 2: no field 'text' \\(found 'body'\\).*--text-field"),
        ('["a", "list"]', "line 2: no field 'text' \\(found a JSON list\\)"),
        ('{"text": 42}', "line 2: field 'text' holds a int, not a string"),
    ],
)
def test_bad_jsonl_line_names_file_and_line(tmp_path, line, problem):
    (tmp_path / "docs.jsonl").write_text('{"text": "good"}\n' + line + "\n")
    with pytest.raises(DataError, match="docs.jsonl, " + problem):
        read_all(tmp_path / "docs.jsonl")


def test_bad_parquet_inputs(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a"], "number": [1]}), tmp_path / "docs.parquet")
    with pytest.raises(DataError, match=r"docs.parquet: no column 'text' \(columns: body, number\)"):
        read_all(tmp_path / "docs.parquet")
    with pytest.raises(DataError, match="docs.parquet: column 'number' has type int64, not string"):
        read_all(tmp_path / "docs.parquet", text_field="number")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="broken.parquet: not a readable Parquet file"):
        read_all(tmp_path / "broken.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(DataError, match=r"docs.parquet needs pyarrow.*pip install depthattn\[parquet\]"):
        read_all(tmp_path / "docs.parquet")


def test_hf_dataset_without_datasets_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(
        DataError, match=r"hf:some/dataset needs the `datasets` library.*pip install depthattn\[datasets\]"
    ):
        read_all("hf:some/dataset")


def test_splits_must_both_get_documents(tmp_path, prepared_dir):
    docs = ["one document", "another document", "a third document"]
    assert all(document_split(doc, 1337, 0.01) == "train" for doc in docs)
    with pytest.raises(DataError, match="the val split got none of the 3 documents.*--val-fraction"):
        prepare(
            [str(write_jsonl(tmp_path / "docs.jsonl", docs))],
            tmp_path / "out",
            tokenizer=prepared_dir / "tokenizer",
            val_fraction=0.01,
            progress=False,
        )
    with pytest.raises(DataError, match="val_fraction must be between 0 and 1"):
        prepare([], tmp_path / "out", val_fraction=1.0, progress=False)


def test_tokenizer_without_eos(tmp_path):
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    with pytest.raises(DataError, match=f"tokenizer {tmp_path / 'tok'} has no eos_token"):
        prepare(
            [str(write_jsonl(tmp_path / "docs.jsonl", [f"a {i}" for i in range(100)]))],  # enough for both splits
            tmp_path / "out",
            tokenizer=tmp_path / "tok",
            progress=False,
        )


@pytest.fixture
def dataset_copy(tmp_path, prepared_dir):
    return shutil.copytree(prepared_dir, tmp_path / "data")


def edit_manifest(data_dir, edit):
    manifest = json.loads((data_dir / "manifest.json").read_text())
    edit(manifest)
    (data_dir / "manifest.json").write_text(json.dumps(manifest))


def test_shard_size_mismatch(dataset_copy):
    with open(dataset_copy / "train_001.bin", "ab") as file:
        file.write(b"\0\0")
    with pytest.raises(DataError, match="shard .*train_001.bin has 10002 bytes, but manifest.json says 5000 tokens"):
        TokenShards(dataset_copy, "train", verify=False)


def test_shard_checksum_mismatch(dataset_copy):
    tokens = np.fromfile(dataset_copy / "val_000.bin", dtype=np.uint16)
    tokens[10] = (tokens[10] + 1) % 300
    tokens.tofile(dataset_copy / "val_000.bin")
    with pytest.raises(DataError, match="shard .*val_000.bin is corrupt: its sha256 differs"):
        TokenShards(dataset_copy, "val")
    assert TokenShards(dataset_copy, "val", verify=False).read(0, 11)[10] == tokens[10]  # verify=False: no hashing


def test_missing_shard(dataset_copy):
    (dataset_copy / "train_000.bin").unlink()
    with pytest.raises(DataError, match="shard .*train_000.bin listed in manifest.json is missing.*--overwrite"):
        TokenShards(dataset_copy, "train")


def test_token_ids_beyond_the_vocabulary(dataset_copy):
    edit_manifest(dataset_copy, lambda manifest: manifest["tokenizer"].update(vocab_size=200))
    with pytest.raises(DataError, match="shard .*train_000.bin holds token id 2.., but the tokenizer has 200 ids"):
        TokenShards(dataset_copy, "train")


def test_unknown_split(prepared_dir):
    with pytest.raises(DataError, match="unknown split 'validation': .*manifest.json has 'train', 'val'"):
        TokenShards(prepared_dir, "validation")


def test_missing_malformed_or_foreign_manifest(tmp_path, dataset_copy):
    # the fix names the input: `prepare --out DIR` alone wrote the embedded corpus into a folder of one's text
    with pytest.raises(DataError, match="no manifest.json in .*: it is not a prepared dataset.*`depthattn prepare "
                                        "--input TEXT --out DIR`"):
        TokenShards(tmp_path / "nothing_here", "train")
    edit_manifest(dataset_copy, lambda manifest: manifest.pop("dtype"))
    with pytest.raises(DataError, match="manifest.json is malformed \\(bad or missing 'dtype'\\)"):
        TokenShards(dataset_copy, "train")
    edit_manifest(dataset_copy, lambda manifest: manifest.update(format_version=99))
    with pytest.raises(DataError, match="format \\('depthattn-token-shards', 99\\) is not.*--input TEXT --overwrite"):
        TokenShards(dataset_copy, "train")
    (dataset_copy / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="manifest.json is not valid JSON"):
        TokenShards(dataset_copy, "train")
