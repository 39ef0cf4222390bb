"""prepare under faults: a failed --overwrite or a full disk leaves the old dataset whole and no temporary files."""

import errno
import io
import json

import pytest

from depthattn import files
from depthattn.cli import main
from depthattn.data.prepare import prepare
from depthattn.files import AtomicFile, NoSpaceLeft, read_records


@pytest.fixture
def dataset(tmp_path, tiny_data):
    """A small prepared dataset in tmp_path/data, from 12 documents, with a notes file of the user's beside it."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"Document {i}. " + "Some words here. " * 40}) + "\n"
                            for i in range(12)))
    prepare([str(docs)], tmp_path / "data", tokenizer=tiny_data / "tokenizer", val_fraction=0.3, shard_tokens=500,
            progress=False)
    (tmp_path / "data" / "notes.txt").write_text("mine")
    return tmp_path / "data"


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_failed_overwrite_keeps_the_old_dataset(dataset, tiny_data, capsys):
    before = snapshot(dataset.parent)
    argv = ["prepare", "--input", str(dataset.parent / "docs.jsonl"), "--out", str(dataset), "--overwrite",
            "--tokenizer", str(tiny_data / "tokenizer"), "--text-field", "body"]
    assert main(argv) == 1
    assert "no field 'body'" in capsys.readouterr().err
    assert snapshot(dataset.parent) == before  # the old dataset whole, and no temporary file anywhere


def test_overwrite_replaces_the_dataset_and_keeps_other_files(dataset, tiny_data):
    manifest = prepare([str(dataset.parent / "docs.jsonl")], dataset, tokenizer=tiny_data / "tokenizer",
                       val_fraction=0.3, shard_tokens=100_000, overwrite=True, progress=False)
    assert sorted(p.name for p in dataset.iterdir()) == ["manifest.json", "notes.txt", "tokenizer", "train_000.bin",
                                                         "val_000.bin"]
    assert json.loads((dataset / "manifest.json").read_text()) == manifest
    assert sorted(p.name for p in dataset.parent.iterdir()) == ["data", "docs.jsonl"]


class FullDisk(io.FileIO):
    """A file on a disk that fills up after `room` more bytes (shared by every file opened)."""
    room = 0

    def write(self, data):
        if len(data) > FullDisk.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        FullDisk.room -= len(data)
        return super().write(data)


def full_disk_open(path, mode="r", *args, **kwargs):
    """`open` where new files (the only ones writes create) go to the full disk."""
    return io.BufferedWriter(FullDisk(path, mode)) if "x" in mode else open(path, mode, *args, **kwargs)


def test_a_full_disk_says_so_and_leaves_no_temporary_files(dataset, tiny_data, monkeypatch, capsys):
    before = snapshot(dataset.parent)
    FullDisk.room = 3000  # room for a few shards of 400 bytes, not for all of them
    monkeypatch.setattr(files, "open", full_disk_open, raising=False)
    argv = ["prepare", "--input", str(dataset.parent / "docs.jsonl"), "--out", str(dataset), "--overwrite",
            "--tokenizer", str(tiny_data / "tokenizer"), "--shard-tokens", "200"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"error: no space left on {dataset} (" in err and " free); free some space and run again" in err
    assert FullDisk.room < 400 and snapshot(dataset.parent) == before  # it failed part-way


def test_a_temporary_file_goes_even_when_closing_it_fails_again(tmp_path, monkeypatch):
    FullDisk.room = 10
    monkeypatch.setattr(files, "open", full_disk_open, raising=False)
    with pytest.raises(NoSpaceLeft, match=f"no space left on {tmp_path}"), AtomicFile(tmp_path / "out.bin") as file:
        file.write(b"x" * 100)  # buffered: the disk fills when the buffer is flushed, and again on close
    assert list(tmp_path.iterdir()) == []


def test_jsonl_drops_a_torn_last_line_and_names_a_bad_one(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert read_records(path) == [{"step": 1}, {"step": 2}]
    assert f"{path}: dropped its last line" in capsys.readouterr().err
    path.write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(ValueError, match=f"{path}, line 2: not valid JSON"):
        read_records(path)
