"""prepare at scale: worker processes, streamed inputs, the bounded tokenizer sample, and their errors."""

import argparse
import filecmp
import json
import random
import sys
import types
from itertools import pairwise

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from depthattn.commands.prepare import add_arguments, run
from depthattn.data import DataError, document_split, encode, prepare, read_manifest, sources
from depthattn.data.encode import Batch, EncodeSettings, document_batches, encode_in_order
from depthattn.data.manifest import DTYPES
from depthattn.data.prepare import TokenizerSample
from depthattn.data.sources import iter_documents, numbered_documents, resolve_sources, split_stream_into_chunks
from tests.data.data_helpers import write_jsonl


def reference_chunks(text: str, chunk_chars: int) -> list[str]:
    """How prepare cut .txt files before it streamed them: the whole text in memory."""
    num_chunks = max(1, round(len(text) / chunk_chars))
    cuts = [0]
    for k in range(1, num_chunks):
        cut = text.find("\n\n", len(text) * k // num_chunks)
        cuts.append(len(text) if cut == -1 else cut)
    cuts.append(len(text))
    chunks = [text[start:end].strip() for start, end in pairwise(cuts)]
    return [chunk for chunk in chunks if chunk]


def in_pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 30)))) if len(text) > 1 else []
    return [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def test_streamed_chunks_are_the_whole_text_chunks():
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice(["a", "b ", "\n", "\n\n", "\n\n\n", " "]) for _ in range(rng.randint(0, 400)))
        chunk_chars = rng.choice([1, 3, 10, 50, 1000])
        pieces = [part for piece in in_pieces(text, rng) for part in (piece, "")[:rng.randint(1, 2)]]  # some empty
        assert list(split_stream_into_chunks(pieces, len(text), chunk_chars)) == reference_chunks(text, chunk_chars)


def test_text_files_are_read_in_pieces(tmp_path, monkeypatch):
    text = "\ufeff" + "caf\u00e9 \u4e2d\u6587\r\n\r\nsecond \U0001f600 paragraph\r\n\r\r\n" * 50
    (tmp_path / "a.txt").write_bytes(text.encode("utf-8"))
    expected = text.removeprefix("\ufeff").replace("\r\n", "\n")
    for read_bytes in (1, 2, 3, 7, 1 << 20):  # pieces that cut characters and CRLFs in two
        monkeypatch.setattr(sources, "READ_BYTES", read_bytes)
        assert "".join(sources.read_text_pieces(tmp_path / "a.txt")) == expected
        assert list(sources.read_text_file(tmp_path / "a.txt", 100)) == reference_chunks(expected, 100)
    (tmp_path / "bad.txt").write_bytes(b"fine text\n" * 100 + b"caf\xe9 au lait")
    monkeypatch.setattr(sources, "READ_BYTES", 64)
    with pytest.raises(DataError, match=r"bad.txt: invalid UTF-8 at byte offset 1003 \(byte 0xe9\)"):
        list(sources.read_text_pieces(tmp_path / "bad.txt"))


def dataset_files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


def assert_same_dataset(a, b):
    assert dataset_files(a) == dataset_files(b)
    for name in dataset_files(a):
        assert filecmp.cmp(a / name, b / name, shallow=False), name


def test_output_does_not_depend_on_the_number_of_workers(tmp_path, monkeypatch, small_docs):
    monkeypatch.setattr(encode, "BATCH_CHARS", 5000)  # many batches, each of a few documents
    docs = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(vocab_size=300, val_fraction=0.2, shard_tokens=3000, progress=False)
    one = prepare([str(docs)], tmp_path / "one", workers=1, **options)
    two = prepare([str(docs)], tmp_path / "two", workers=2, **options)
    assert one == two and len(one["splits"]["train"]["files"]) > 3
    assert_same_dataset(tmp_path / "one", tmp_path / "two")
    assert "workers" not in json.dumps(one)


def test_a_large_text_file_is_spread_over_batches(tmp_path, monkeypatch, prepared_dir, small_docs):
    monkeypatch.setattr(encode, "BATCH_CHARS", 8000)
    monkeypatch.setattr(sources, "READ_BYTES", 4096)
    text = "\n\n".join(small_docs)
    (tmp_path / "big.txt").write_text(text)
    documents = list(numbered_documents(resolve_sources([tmp_path / "big.txt"]), chunk_chars=1000))
    assert [doc for _, _, doc in documents] == reference_chunks(text, 1000)
    assert len(list(document_batches(documents))) > 10
    options = dict(tokenizer=prepared_dir / "tokenizer", chunk_chars=1000, val_fraction=0.2, progress=False)
    one = prepare(tmp_path / "big.txt", tmp_path / "one", workers=1, **options)
    prepare(tmp_path / "big.txt", tmp_path / "two", workers=2, **options)
    assert_same_dataset(tmp_path / "one", tmp_path / "two")
    assert sum(split["num_documents"] for split in one["splits"].values()) == len(documents)


def test_batches_in_flight_are_bounded(prepared_dir):
    pulled = []

    def batches():
        for number in range(1, 40):
            pulled.append(number)
            yield Batch("input.jsonl", number, [f"document {number}"])

    settings = EncodeSettings(str(prepared_dir / "tokenizer"), 0, DTYPES["uint16"], 1337, 0.2)
    encoded = encode_in_order(batches(), settings, workers=2)
    next(encoded)
    assert len(pulled) == 4  # 2 x workers read ahead, no more
    encoded.close()


def test_the_tokenizer_sample_is_bounded_and_recorded(tmp_path, small_docs):
    train_docs = [doc for doc in small_docs if document_split(doc, 1337, 0.2) == "train"]
    read = []

    def numbered():
        for number, doc in enumerate(small_docs, 1):
            read.append(number)
            yield "in.jsonl", number, doc

    sample = TokenizerSample(numbered(), 7000, 1337, 0.2)
    texts = list(sample)
    assert "".join(texts) == "".join(train_docs).encode()[:7000].decode() and sample.used == 7000
    assert texts[:-1] == train_docs[: len(texts) - 1]  # whole documents, the last one cut
    assert len(read) < len(small_docs)  # reading stopped there

    docs = write_jsonl(tmp_path / "docs.jsonl", small_docs)
    options = dict(vocab_size=300, val_fraction=0.2, progress=False)
    manifest = prepare([str(docs)], tmp_path / "small_sample", tokenizer_sample_bytes=7000, **options)
    assert (manifest["tokenizer"]["sample_bytes"], manifest["tokenizer"]["sample_bytes_used"]) == (7000, 7000)
    whole = prepare([str(docs)], tmp_path / "whole", **options)["tokenizer"]
    assert whole["sample_bytes_used"] == sum(len(doc.encode()) for doc in train_docs)
    assert read_manifest(tmp_path / "small_sample")["tokenizer"]["sample_bytes"] == 7000
    merges = [len(json.loads((tmp_path / name / "tokenizer" / "tokenizer.json").read_text())["model"]["merges"])
              for name in ("small_sample", "whole")]
    assert merges[0] <= merges[1] and (tmp_path / "small_sample" / "tokenizer" / "tokenizer.json").read_text() != (
        tmp_path / "whole" / "tokenizer" / "tokenizer.json").read_text()


@pytest.mark.parametrize("workers", [0, -2])
def test_bad_workers_or_sample_size_name_the_option(tmp_path, capsys, workers):
    with pytest.raises(DataError, match=f"workers must be at least 1, got {workers}. Fix --workers"):
        prepare([], tmp_path / "out", workers=workers, progress=False)
    with pytest.raises(DataError, match="tokenizer_sample_bytes must be positive, got 0. Fix --tokenizer-sample-bytes"):
        prepare([], tmp_path / "out", tokenizer_sample_bytes=0, progress=False)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--out", str(tmp_path / "out"), "--workers", str(workers)])) == 1
    assert "--workers" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failure_in_a_worker_leaves_the_output_as_it_was(tmp_path, prepared_dir, small_docs):
    out = tmp_path / "out"
    options = dict(tokenizer=prepared_dir / "tokenizer", val_fraction=0.2, progress=False)
    prepare([str(write_jsonl(tmp_path / "good.jsonl", small_docs))], out, **options)
    before = {name: (out / name).read_bytes() for name in dataset_files(out)}
    bad = tmp_path / "bad.jsonl"  # the third document holds a lone surrogate, which no tokenizer encodes
    bad.write_text('{"text": "fine"}\n\n{"text": "also fine"}\n{"text": "bad \\ud800 text"}\n'
                   + "".join(f'{{"text": "more {i}"}}\n' for i in range(20)))  # enough for both splits
    with pytest.raises(DataError, match=r"input .*bad.jsonl, document 3: character 4 is a lone surrogate"):
        prepare([str(bad)], out, overwrite=True, workers=2, **options)
    with pytest.raises(DataError, match=r"input .*bad.jsonl, document 3: character 4 is a lone surrogate"):
        prepare([str(bad)], tmp_path / "trained", vocab_size=300, progress=False)  # found by the tokenizer sample

    word_level = Tokenizer(models.WordLevel({"<|endoftext|>": 0, "fine": 1}))  # no unknown token: others fail
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="<|endoftext|>").save_pretrained(tmp_path / "words")
    words = write_jsonl(tmp_path / "words.jsonl", ["fine"] * 30 + ["fine unknown"] + [f"more {i}" for i in range(20)])
    with pytest.raises(DataError, match=r"input .*words.jsonl, document 31: the tokenizer cannot encode it"):
        prepare([str(words)], out, tokenizer=tmp_path / "words", overwrite=True, workers=2, progress=False)

    assert {name: (out / name).read_bytes() for name in dataset_files(out)} == before
    assert not list(tmp_path.glob(".*"))  # no temporary folder left


def test_the_manifest_records_the_split_a_hf_dataset_was_read_from(monkeypatch, tmp_path):
    def load_dataset(path, config, split, streaming=False):
        return iter([{"text": f"document {i} of the {split} split"} for i in range(30)])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    manifest = prepare(["hf:some/data"], tmp_path / "out", vocab_size=280, hf_split="validation", workers=1,
                       progress=False)
    assert manifest["hf_split"] == "validation"


def test_hf_datasets_are_streamed(monkeypatch):
    def load_dataset(path, config, split, streaming=False):
        assert (path, config, split, streaming) == ("some/data", "en", "train", True)
        return iter([{"text": "first", "id": 1}, {"text": None, "id": 2}, {"text": "second", "id": 3}])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert list(iter_documents(resolve_sources(["hf:some/data:en"]))) == ["first", "second"]
    with pytest.raises(DataError, match=r"hf:some/data:en: no column 'body' \(columns: text, id\)"):
        list(iter_documents(resolve_sources(["hf:some/data:en"]), text_field="body"))
