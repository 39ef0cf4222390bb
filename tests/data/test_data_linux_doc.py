"""The `linux-doc` input, on a small folder in the layout of the package's _sources/ (tests never read the package)."""

import os
import subprocess
import sys

import pytest

from depthattn.cli import main
from depthattn.data import DataError, TokenShards, document_split, linux_doc, load_tokenizer, prepare, read_manifest
from depthattn.data.sources import iter_documents, numbered_documents, resolve_sources
from tests.data.data_helpers import decoded_documents

LONG = "process/email-clients.rst.txt"  # cut into several documents at --chunk-chars 1000; held out at 0.2


def paragraphs(name: str, count: int) -> str:
    return "\n\n".join(f"{name}, paragraph {k}: the kernel does {k} things here." for k in range(count)) + "\n"


def write_docs(root, count: int = 30):
    """`count` short English files in two folders, one long one, a translation and a file that is not .rst.txt."""
    for number in range(count):
        folder = "admin-guide" if number % 2 else "core-api"
        path = root / folder / f"page{number}.rst.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f".. SPDX-License-Identifier: GPL-2.0\n\nPage {number}\n=======\n\n{paragraphs(path.name, 2)}")
    (root / "process").mkdir(exist_ok=True)
    (root / LONG).write_text(paragraphs("long", 100))
    (root / "translations" / "zh_CN").mkdir(parents=True, exist_ok=True)
    (root / "translations" / "zh_CN" / "index.rst.txt").write_text("TRANSLATED 内核文档\n")
    (root / "objects.inv").write_text("NOT A SOURCE\n")
    return root


@pytest.fixture
def docs(tmp_path, monkeypatch):
    """The slice, named by DEPTHATTN_LINUX_DOC_DIR."""
    root = write_docs(tmp_path / "_sources")
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(root))
    return root


@pytest.fixture
def fake_dpkg(tmp_path, monkeypatch):
    """A dpkg-query first on PATH that knows the package at version 6.1.999-1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "dpkg-query"
    script.write_text('#!/bin/sh\n[ "$3" = linux-doc-6.1 ] && printf 6.1.999-1 && exit 0\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_each_english_file_is_a_document_and_translations_are_skipped(docs):
    sources = resolve_sources(["linux-doc"])
    assert [source.name for source in sources] == ["linux-doc"]
    documents = list(numbered_documents(sources, chunk_chars=1000))
    files = [document[3] for document in documents]
    assert sorted(set(files)) == sorted(set(files), key=files.index)  # in sorted order of the path
    assert len(set(files)) == 31 and not any(file.startswith("translations/") for file in files)
    texts = list(iter_documents(sources, chunk_chars=1000))
    assert not any("TRANSLATED" in text or "NOT A SOURCE" in text for text in texts)
    assert files.count(LONG) > 3  # the long file is chunked as a text file is, the others are one document each
    assert all(files.count(file) == 1 for file in files if file != LONG)
    assert [text for text, file in zip(texts, files, strict=True) if file == LONG] == list(
        iter_documents(resolve_sources([docs / LONG]), chunk_chars=1000))


def test_whole_files_are_held_out_by_their_path(docs, prepared_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["prepare", "--input", "linux-doc", "--out", str(out), "--tokenizer", str(prepared_dir / "tokenizer"),
                 "--val-fraction", "0.2", "--chunk-chars", "1000"]) == 0
    assert "linux-doc: The Linux kernel's documentation" in capsys.readouterr().out
    documents = list(numbered_documents(resolve_sources(["linux-doc"]), chunk_chars=1000))
    held_out = {document[3] for document in documents if document_split(document[3], 1337, 0.2) == "val"}
    # the slice is one where splitting by text would scatter the long file over both splits
    assert LONG in held_out
    assert {document_split(text, 1337, 0.2) for _, _, text, file in documents if file == LONG} == {"train", "val"}
    tokenizer = load_tokenizer(out / "tokenizer")
    for split in ("train", "val"):
        expected = [text for _, _, text, file in documents if (file in held_out) == (split == "val")]
        assert decoded_documents(tokenizer, (shards := TokenShards(out, split)).read(0, len(shards))) == expected
    (record,) = read_manifest(out)["source_files"]
    assert record["num_files"] == 31 and record["num_held_out_files"] == len(held_out) > 0
    assert record["version"] is None and record["path"] == str(docs) and "GPL-2.0" in record["license"]
    assert read_manifest(out)["text_chunks"] == {"num_files_cut": 1, "num_documents": [d[3] for d in documents]
                                                 .count(LONG)}


def test_a_file_keeps_its_split_when_files_are_added(docs):
    def splits():
        return {document[3]: document_split(document[3], 1337, 0.2) for document in
                numbered_documents(resolve_sources(["linux-doc"]))}

    before = splits()
    for number in range(100, 120):
        (docs / "core-api" / f"new{number}.rst.txt").write_text(f"New page {number}.\n")
    after = splits()
    assert len(after) == len(before) + 20 and {file: after[file] for file in before} == before


def test_the_manifest_records_the_installed_version_and_a_checksum_of_the_files(docs, fake_dpkg, monkeypatch):
    monkeypatch.delenv(linux_doc.DIR_VARIABLE)
    monkeypatch.setattr(linux_doc, "SOURCES_DIR", docs)  # stands in for the installed package's folder
    (source,) = resolve_sources(["linux-doc"])
    record = linux_doc.source_record(docs, 1337, 0.05)
    assert record["version"] == "6.1.999-1" and "linux-doc-6.1 6.1.999-1" in record["attribution"]
    (docs / "translations" / "zh_CN" / "index.rst.txt").write_text("changed\n")
    (docs / "objects.inv").write_text("changed\n")
    assert linux_doc.source_record(docs, 1337, 0.05)["sha256"] == record["sha256"]  # not read, not in the sum
    (docs / "core-api" / "page0.rst.txt").write_text("Edited.\n")
    edited = linux_doc.source_record(docs, 1337, 0.05)["sha256"]
    (docs / "core-api" / "added.rst.txt").write_text("Added.\n")
    added = linux_doc.source_record(docs, 1337, 0.05)
    assert len({record["sha256"], edited, added["sha256"]}) == 3 and added["num_files"] == 32


def test_without_the_package_the_error_names_the_install(tmp_path, monkeypatch):
    monkeypatch.delenv(linux_doc.DIR_VARIABLE, raising=False)
    monkeypatch.setattr(linux_doc, "SOURCES_DIR", tmp_path / "absent")
    with pytest.raises(DataError, match=r"needs the Debian package linux-doc-6\.1.*: apt-get install linux-doc-6\.1"):
        resolve_sources(["linux-doc"])


def test_a_wrong_folder_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=f"{linux_doc.DIR_VARIABLE}=.*nowhere is not a folder.*unset it"):
        resolve_sources(["linux-doc"])
    only_translations = tmp_path / "_sources" / "translations" / "it_IT"
    only_translations.mkdir(parents=True)
    (only_translations / "index.rst.txt").write_text("Documentazione\n")
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(tmp_path / "_sources"))
    with pytest.raises(DataError, match=r"holds no \.rst\.txt file outside translations/.*--reinstall"):
        resolve_sources(["linux-doc"])
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(tmp_path))  # the html/ folder above _sources/
    with pytest.raises(DataError, match=f"holds the documentation's _sources folder.*point {linux_doc.DIR_VARIABLE} at "
                                        f".*{tmp_path.name}/_sources"):
        resolve_sources(["linux-doc"])


def test_too_few_files_to_hold_one_out_names_a_val_fraction(tmp_path, monkeypatch, prepared_dir):
    root = tmp_path / "_sources"
    (root / "core-api").mkdir(parents=True)
    for number in range(3):  # by their paths, none of these goes to val at 0.05
        (root / "core-api" / f"page{number}.rst.txt").write_text(paragraphs(f"page{number}", 3))
    assert {document_split(f"core-api/page{number}.rst.txt", 1337, 0.05) for number in range(3)} == {"train"}
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(root))
    with pytest.raises(DataError, match=r"the val split got none of the \d+ documents.*Pass --val-fraction 0\.\d+"):
        prepare(["linux-doc"], tmp_path / "out", tokenizer=prepared_dir / "tokenizer", progress=False)


def test_importing_depthattn_runs_no_package_tool(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("apt-get", "apt", "dpkg", "dpkg-query"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {tmp_path}/ran-{tool}\n")
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "-c", "import depthattn, depthattn.data, depthattn.data.linux_doc"], env=env,
                   check=True)
    assert not list(tmp_path.glob("ran-*"))
