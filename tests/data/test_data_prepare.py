"""prepare: documents -> split -> tokens -> shards + manifest."""

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from depthattn.commands.prepare import add_arguments, run
from depthattn.data import DataError, TokenShards, document_split, load_tokenizer, prepare, read_manifest
from depthattn.data.manifest import token_dtype_name
from depthattn.data.sources import split_into_chunks
from tests.data.data_helpers import decoded_documents, write_jsonl


def split_tokens(data_dir, split):
    shards = TokenShards(data_dir, split)
    return shards.read(0, len(shards))


def test_round_trip_text_to_shards_to_text(prepared_dir, small_docs):
    tokenizer = load_tokenizer(prepared_dir / "tokenizer")
    for split in ("train", "val"):
        expected = [doc for doc in small_docs if document_split(doc, 1337, 0.2) == split]
        assert decoded_documents(tokenizer, split_tokens(prepared_dir, split)) == expected
        assert TokenShards(prepared_dir, split).num_documents == len(expected)


def test_manifest_describes_the_shards(prepared_dir, small_docs):
    manifest = read_manifest(prepared_dir)
    assert manifest["dtype"] == "uint16" and manifest["tokenizer"] == {
        "path": "tokenizer",
        "origin": manifest["tokenizer"]["origin"],
        "vocab_size_requested": 300,
        "sample_bytes": 2**30,  # requested; the whole train split is smaller
        "sample_bytes_used": sum(
            len(doc.encode()) for doc in small_docs if document_split(doc, 1337, 0.2) == "train"
        ),
        "vocab_size": 300,
        "eos_id": 0,
    }
    train = manifest["splits"]["train"]
    assert len(train["files"]) > 1 and all(file["num_tokens"] == 5000 for file in train["files"][:-1])
    assert train["num_tokens"] == sum(file["num_tokens"] for file in train["files"])
    for file in train["files"]:
        assert (prepared_dir / file["name"]).stat().st_size == 2 * file["num_tokens"]
    tokens = split_tokens(prepared_dir, "train")
    assert (tokens == 0).sum() == train["num_documents"]  # one EOS per document
    assert tokens[-1] == 0


def test_read_crosses_shard_boundaries(prepared_dir):
    shards = TokenShards(prepared_dir, "train")
    whole = np.concatenate([np.asarray(shard, dtype=np.int64) for shard in shards.shards])
    assert np.array_equal(shards.read(4990, 20), whole[4990:5010])
    assert shards.read(0, 3).dtype == np.int64
    with pytest.raises(IndexError):
        shards.read(len(shards) - 2, 3)


def test_document_split_is_seeded_disjoint_and_near_the_fraction():
    texts = [f"document number {i}" for i in range(4000)]
    splits = [document_split(text, 7, 0.05) for text in texts]
    assert splits == [document_split(text, 7, 0.05) for text in texts]
    assert 0.03 < splits.count("val") / len(texts) < 0.07
    assert splits != [document_split(text, 8, 0.05) for text in texts]


def test_split_does_not_depend_on_input_order(tmp_path, prepared_dir, small_docs):
    first, second = (
        write_jsonl(tmp_path / "a.jsonl", small_docs[:20]),
        write_jsonl(tmp_path / "b.jsonl", small_docs[20:]),
    )
    tokenizer_dir = prepared_dir / "tokenizer"
    prepare([str(first), str(second)], tmp_path / "forward", tokenizer=tokenizer_dir, val_fraction=0.2, progress=False)
    reversed_path = write_jsonl(tmp_path / "reversed.jsonl", small_docs[::-1])
    prepare([str(reversed_path)], tmp_path / "backward", tokenizer=tokenizer_dir, val_fraction=0.2, progress=False)
    tokenizer = load_tokenizer(tokenizer_dir)
    forward = {
        split: decoded_documents(tokenizer, split_tokens(tmp_path / "forward", split)) for split in ("train", "val")
    }
    backward = {
        split: decoded_documents(tokenizer, split_tokens(tmp_path / "backward", split)) for split in ("train", "val")
    }
    assert sorted(forward["val"]) == sorted(backward["val"]) and sorted(forward["train"]) == sorted(backward["train"])
    assert not set(forward["val"]) & set(forward["train"])
    assert len(forward["val"]) + len(forward["train"]) == len(small_docs)


def test_text_files_are_cut_into_documents_at_blank_lines(tmp_path, prepared_dir):
    text = "\r\n\r\n".join(f"Paragraph {i} of the story.\r\nA second line." for i in range(60))
    (tmp_path / "story.txt").write_bytes(text.encode("utf-8"))
    manifest = prepare(
        tmp_path / "story.txt",  # a single input may be given bare
        tmp_path / "out",
        tokenizer=prepared_dir / "tokenizer",
        val_fraction=0.3,
        chunk_chars=200,
        progress=False,
    )
    documents = split_into_chunks(text.replace("\r\n", "\n"), 200)
    assert sum(split["num_documents"] for split in manifest["splits"].values()) == len(documents) > 10
    tokenizer = load_tokenizer(prepared_dir / "tokenizer")
    train = [doc for doc in documents if document_split(doc, 1337, 0.3) == "train"]
    assert decoded_documents(tokenizer, split_tokens(tmp_path / "out", "train")) == train


def test_parquet_input(tmp_path, prepared_dir, small_docs):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": small_docs, "id": list(range(len(small_docs)))}), tmp_path / "docs.parquet")
    prepare(
        [str(tmp_path / "docs.parquet")],
        tmp_path / "out",
        tokenizer=prepared_dir / "tokenizer",
        text_field="body",
        val_fraction=0.2,
        shard_tokens=5000,
        progress=False,
    )
    for split in ("train", "val"):
        assert np.array_equal(split_tokens(tmp_path / "out", split), split_tokens(prepared_dir, split))


def test_literal_eos_text_inside_a_document_is_not_an_eos_token(tmp_path, prepared_dir):
    docs = [f"doc {i} mentions <|endoftext|> in its text" for i in range(30)]
    prepare(
        [str(write_jsonl(tmp_path / "docs.jsonl", docs))],
        tmp_path / "out",
        tokenizer=prepared_dir / "tokenizer",
        val_fraction=0.2,
        progress=False,
    )
    tokenizer = load_tokenizer(prepared_dir / "tokenizer")
    for split in ("train", "val"):
        shards = TokenShards(tmp_path / "out", split)
        tokens = shards.read(0, len(shards))
        assert (tokens == 0).sum() == shards.num_documents
        assert tokenizer.decode(tokens.tolist()).count("<|endoftext|>") == 2 * shards.num_documents


def test_dtype_is_uint16_up_to_65536_ids_then_uint32(tmp_path):
    assert token_dtype_name(65536) == "uint16" and token_dtype_name(65537) == "uint32"
    vocab = {"<|endoftext|>": 0, "[UNK]": 1} | {f"w{i}": i + 2 for i in range(70_000)}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="<|endoftext|>", unk_token="[UNK]").save_pretrained(
        tmp_path / "big_tokenizer"
    )
    docs = [f"w{i} w69999 w{65534 + i}" for i in range(20)]
    manifest = prepare(
        [str(write_jsonl(tmp_path / "docs.jsonl", docs))],
        tmp_path / "out",
        tokenizer=tmp_path / "big_tokenizer",
        val_fraction=0.2,
        progress=False,
    )
    assert manifest["dtype"] == "uint32" and manifest["tokenizer"]["vocab_size"] == 70_002
    train_docs = [doc for doc in docs if document_split(doc, 1337, 0.2) == "train"]
    expected = [id_ for doc in train_docs for id_ in [vocab[word] for word in doc.split()] + [0]]
    assert split_tokens(tmp_path / "out", "train").tolist() == expected
    assert (tmp_path / "out" / "train_000.bin").stat().st_size == 4 * len(expected)


def test_rerun_refuses_unless_overwrite(tmp_path, prepared_dir, small_docs):
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    prepare([str(docs_path)], tmp_path / "out", shard_tokens=1000, **options)
    with pytest.raises(DataError, match="already holds a prepared dataset.*--overwrite"):
        prepare([str(docs_path)], tmp_path / "out", **options)
    manifest = prepare([str(docs_path)], tmp_path / "out", overwrite=True, **options)
    listed = {file["name"] for split in manifest["splits"].values() for file in split["files"]}
    assert {path.name for path in (tmp_path / "out").glob("*.bin")} == listed == {"train_000.bin", "val_000.bin"}


def test_files_of_a_datasets_names_without_a_manifest_are_refused_not_deleted(tmp_path, prepared_dir, small_docs):
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    out = tmp_path / "out"
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "NOTES.md").write_text("mine")
    (out / "train_000.bin").write_bytes(b"mine")
    with pytest.raises(DataError, match=r"holds files a dataset would replace \(train_000.bin, tokenizer/\), without "
                                        "a manifest.json: move them away, pass --overwrite"):
        prepare([str(docs_path)], out, tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    assert (out / "tokenizer" / "NOTES.md").read_text() == "mine" and (out / "train_000.bin").read_bytes() == b"mine"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm, a filesystem of its own")
def test_an_out_folder_on_another_filesystem_through_a_link(tmp_path, prepared_dir, small_docs):
    """The dataset is built inside --out, where a link or a mount puts it: moving it in stays a rename."""
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        (tmp_path / "out").symlink_to(elsewhere, target_is_directory=True)
        options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
        first = prepare([str(docs_path)], tmp_path / "out", **options)
        again = prepare([str(docs_path)], tmp_path / "out", overwrite=True, **options)
        assert first["splits"] == again["splits"] and (elsewhere / "manifest.json").is_file()
        assert sorted(p.name for p in elsewhere.iterdir()) == ["manifest.json", "tokenizer", "train_000.bin",
                                                                "val_000.bin"]  # no temporary folder left
    finally:
        shutil.rmtree(elsewhere)


def killed_at_rename(monkeypatch, stop_at: int) -> None:
    """prepare.py's own os and shutil as a SIGKILL leaves them: the process stops at its `stop_at`-th rename, before
    any cleanup (rmtree does nothing). monkeypatch.undo() brings them back."""
    prepare_module = sys.modules["depthattn.data.prepare"]  # (the package's `prepare` is the function)
    calls = []

    def killed(source, target):
        calls.append(source)
        if len(calls) == stop_at:
            raise SystemExit("killed")
        os.replace(source, target)

    monkeypatch.setattr(prepare_module, "os", SimpleNamespace(**{**vars(os), "replace": killed}))
    monkeypatch.setattr(prepare_module, "shutil", SimpleNamespace(rmtree=lambda *args, **kwargs: None))


@pytest.mark.parametrize("stop_at", [2, 5, 7, 8])  # moving the old files aside; the new ones in; all but the manifest
def test_a_prepare_stopped_while_replacing_a_dataset_gives_the_old_one_back(tmp_path, prepared_dir, small_docs,
                                                                            monkeypatch, stop_at):
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    out = tmp_path / "out"
    prepare([str(docs_path)], out, **options)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    killed_at_rename(monkeypatch, stop_at)
    with pytest.raises(SystemExit):
        prepare([str(write_jsonl(tmp_path / "other.jsonl", small_docs[:20]))], out, overwrite=True, **options)
    monkeypatch.undo()
    assert not (out / "manifest.json").exists()  # the state a kill leaves: no dataset a reader would take
    with pytest.raises(DataError, match="already holds a prepared dataset"):
        prepare([str(docs_path)], out, **options)  # the old one is back, so this needs --overwrite
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("stop_at", [1, 3])  # the first file in; all but the manifest
def test_a_first_prepare_stopped_while_moving_its_dataset_in_leaves_nothing_the_next_refuses(
        tmp_path, prepared_dir, small_docs, monkeypatch, stop_at):
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    killed_at_rename(monkeypatch, stop_at)
    with pytest.raises(SystemExit):
        prepare([str(docs_path)], tmp_path / "out", **options)
    monkeypatch.undo()
    assert not (tmp_path / "out" / "manifest.json").exists()
    again = prepare([str(docs_path)], tmp_path / "out", **options)  # no --overwrite: the partial files went
    assert again["splits"] == prepare([str(docs_path)], tmp_path / "whole", **options)["splits"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", "tokenizer", "train_000.bin",
                                                                     "val_000.bin"]


def test_a_second_prepare_into_a_folder_being_written_is_refused_and_removes_nothing(tmp_path, prepared_dir,
                                                                                     small_docs):
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    out = tmp_path / "out"
    building = out / ".building.0123456789abcdef.tmp"  # the first one's, as its prepare makes it
    building.mkdir(parents=True)
    first = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(first, fcntl.LOCK_EX)  # as the first prepare holds it
        with pytest.raises(DataError, match=f"another prepare is writing into {out} now"):
            prepare([str(docs_path)], out, **options)
        assert building.is_dir()
    finally:
        os.close(first)
    prepare([str(docs_path)], out, **options)  # the first one gone: its leftover goes
    assert not building.exists() and (out / "manifest.json").is_file()


def test_a_failed_run_leaves_no_dataset_and_no_temporary_files(tmp_path, prepared_dir, small_docs):
    good = write_jsonl(tmp_path / "good.jsonl", small_docs * 2)  # more than one encoding batch
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(DataError, match="bad.jsonl, line 2: not valid JSON"):
        prepare(
            [str(good), str(bad)],
            tmp_path / "out",
            tokenizer=prepared_dir / "tokenizer",
            shard_tokens=1000,
            val_fraction=0.2,
            progress=False,
        )
    assert not (tmp_path / "out").exists()  # although full shards were written before the error
    assert not list(tmp_path.glob(".*"))


def test_embedded_corpus_is_the_default_input(tmp_path):
    manifest = prepare([], tmp_path / "out", vocab_size=512, progress=False)
    splits = manifest["splits"]
    assert manifest["source"] == ["embedded"]
    assert splits["train"]["num_documents"] + splits["val"]["num_documents"] == 205
    assert 5 <= splits["val"]["num_documents"] <= 20
    assert splits["train"]["num_tokens"] > 1_000_000


def test_cli_arguments_and_run(tmp_path, capsys, small_docs):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    docs_path = write_jsonl(tmp_path / "docs.jsonl", small_docs, field="body")
    args = parser.parse_args(
        [
            "--input",
            str(docs_path),
            "--out",
            str(tmp_path / "out"),
            "--vocab-size",
            "300",
            "--val-fraction",
            "0.2",
            "--text-field",
            "body",
            "--seed",
            "3",
            "--shard-tokens",
            "4000",
        ]
    )
    assert run(args) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["seed"], manifest["text_field"], manifest["shard_tokens"]) == (3, "body", 4000)
    assert manifest["hf_split"] is None  # no hf: input
    assert "train:" in capsys.readouterr().out

    assert run(parser.parse_args(["--input", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "x")])) == 1
    assert "input file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--tokenizer", "t", "--vocab-size", "300"])
    assert parser.parse_args(["--out", "x"]).input == ["embedded"]
