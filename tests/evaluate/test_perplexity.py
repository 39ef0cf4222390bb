"""`depthattn eval`: windows, agreement with a plain loop and with training's validation, bits per byte, errors."""

import argparse
import itertools
import json
import math
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from depthattn.commands import eval as eval_command
from depthattn.data import TokenShards, embedded_corpus_documents, load_tokenizer, prepare
from depthattn.evaluate.perplexity import (
    TokenStream,
    compute_perplexity,
    count_bytes,
    encode_texts,
    evaluate_perplexity,
    per_document,
    score_stream,
    window_spans,
)
from depthattn.train import evaluate as train_evaluate
from depthattn.train.distributed import World
from tests.evaluate.conftest import SEQ_LEN
from tests.helpers import tiny_model


@torch.no_grad()
def plain_loop(model, ids: torch.Tensor, block_size: int, stride: int) -> tuple[float, int]:
    """Hugging Face's perplexity-guide loop, one window at a time: (total nats, scored tokens)."""
    total, count, last_scored = 0.0, 0, 0  # last_scored: index of the last target scored so far
    for begin in range(0, len(ids) - 1, stride):
        end = min(begin + block_size, len(ids) - 1)  # inputs [begin, end), targets [begin + 1, end]
        logits = model(ids[None, begin:end]).logits[0]
        nll = F.cross_entropy(logits.double(), ids[begin + 1:end + 1], reduction="none")
        new = end - last_scored
        total += nll[-new:].sum().item()
        count += new
        last_scored = end
        if end == len(ids) - 1:
            break
    return total, count


@pytest.mark.parametrize("num_tokens, block_size, stride", [
    (2, 4, 4), (10, 4, 4), (9, 4, 4), (10, 4, 2), (10, 4, 1), (37, 8, 3), (5, 16, 16), (100, 16, 15)])
def test_windows_score_every_token_but_the_first_once(num_tokens, block_size, stride):
    spans = window_spans(num_tokens, block_size, stride)
    scored = []
    for k, (begin, length, num_scored) in enumerate(spans):
        assert begin == k * stride and 1 <= length <= block_size and 1 <= num_scored <= length
        targets = list(range(begin + length - num_scored + 1, begin + length + 1))
        if k > 0:  # context of each scored target: the window's tokens before it
            assert min(t - begin for t in targets) >= block_size - stride + 1
        scored += targets
    assert scored == list(range(1, num_tokens))


@pytest.mark.parametrize("stride, batch_size", [(16, 1), (16, 3), (5, 1), (5, 3), (3, 8)])
def test_fixed_and_sliding_windows_match_a_plain_loop(stride, batch_size):
    model = tiny_model(max_position_embeddings=16)
    ids = torch.randint(0, model.config.vocab_size, (41,), generator=torch.Generator().manual_seed(1))
    expected_nats, expected_count = plain_loop(model, ids, 16, stride)
    result = compute_perplexity(model, ids, block_size=16, stride=stride, batch_size=batch_size)
    assert result["tokens"] == expected_count == 40
    assert result["nats"] == pytest.approx(expected_nats, rel=1e-6)
    assert result["loss"] == pytest.approx(expected_nats / expected_count, rel=1e-6)
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]), rel=1e-9)


def test_stride_equal_to_block_size_is_fixed_blocks():
    model = tiny_model()
    ids = torch.randint(0, model.config.vocab_size, (90,), generator=torch.Generator().manual_seed(2))
    fixed = compute_perplexity(model, ids, block_size=32)
    assert compute_perplexity(model, ids, block_size=32, stride=32, batch_size=2) == pytest.approx(fixed, rel=1e-9)
    with torch.no_grad():  # the blocks by hand: inputs [0, 32), [32, 64), [64, 89)
        total = sum(F.cross_entropy(model(ids[None, b:min(b + 32, 89)]).logits[0].double(), ids[b + 1:b + 33],
                                    reduction="sum").item() for b in (0, 32, 64))
    assert fixed["nats"] == pytest.approx(total, rel=1e-6)
    assert fixed["windows"] == 3
    sliding = compute_perplexity(model, ids, block_size=32, stride=8)
    assert sliding["tokens"] == fixed["tokens"] and sliding["loss"] != pytest.approx(fixed["loss"], rel=1e-6)


def test_fixed_blocks_on_shards_equal_trainings_validation_loss(trained_model, eval_data):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(trained_model).eval()
    shards = TokenShards(eval_data, "val")
    windows = 6  # training's validation: 3 batches of 2 windows of SEQ_LEN + 1 tokens at multiples of SEQ_LEN
    expected = train_evaluate(model, shards, 2, SEQ_LEN, max_batches=3, world=World())
    result = compute_perplexity(model, TokenStream(shards, max_length=windows * SEQ_LEN + 1), SEQ_LEN, batch_size=2)
    assert result["tokens"] == windows * SEQ_LEN
    assert result["loss"] == pytest.approx(expected, rel=1e-5)


def test_bits_per_byte_by_hand(trained_model, tmp_path):
    from transformers import AutoModelForCausalLM

    text = "To be, or not to be — that is the question:\nWhether 'tis nobler in the mind to suffer\n"
    path = tmp_path / "hamlet.txt"
    path.write_text(text, encoding="utf-8")
    result = evaluate_perplexity(trained_model, text=[path], block_size=256, progress=False)

    tokenizer = load_tokenizer(trained_model)
    model = AutoModelForCausalLM.from_pretrained(trained_model).eval()
    eos = tokenizer.eos_token_id
    ids = torch.tensor([eos] + tokenizer(text, add_special_tokens=False)["input_ids"] + [eos])  # start, text, end
    with torch.no_grad():
        nats = F.cross_entropy(model(ids[None, :-1]).logits[0].double(), ids[1:], reduction="sum").item()
    num_bytes = len(text.encode("utf-8"))  # the dash is 3 bytes: bytes, not characters
    assert num_bytes == len(text) + 2  # guards the point of the test: a multi-byte character in the text
    assert result["tokens"] == len(ids) - 1 and result["bytes"] == num_bytes
    assert result["loss"] == pytest.approx(nats / (len(ids) - 1), rel=1e-6)
    assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / num_bytes, rel=1e-6)


def test_a_text_file_is_scored_as_prepare_reads_it(trained_model, tmp_path):
    """A byte order mark and CRLF line ends are read away, as by prepare: the same text scores the same from
    --text whatever the file's encoding conventions."""
    text = "To be, or not to be,\nthat is the question.\n"
    plain, windows = tmp_path / "plain.txt", tmp_path / "windows.txt"
    plain.write_text(text, encoding="utf-8")
    windows.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    scored = [evaluate_perplexity(trained_model, text=[path], block_size=64, progress=False)
              for path in (plain, windows)]
    assert scored[0]["bytes"] == len(text.encode("utf-8"))
    assert {key: scored[1][key] for key in ("nats", "tokens", "bytes")} == \
        {key: scored[0][key] for key in ("nats", "tokens", "bytes")}


def test_shard_bytes_are_the_documents_bytes(trained_model, eval_data, val_documents):
    tokenizer = load_tokenizer(trained_model)
    stream = TokenStream(TokenShards(eval_data, "val"), prefix=[tokenizer.eos_token_id])
    expected = sum(len(d.encode("utf-8")) for d in val_documents)
    assert count_bytes(stream, tokenizer) == expected
    assert count_bytes(stream, tokenizer, chunk_tokens=1000) == expected  # pieces cut after document ends


def test_bytes_are_the_documents_bytes_under_a_sentencepiece_style_decoder():
    """Metaspace (Llama 2, Mistral) drops a document's leading space only at the start of a decode: each document
    is decoded on its own, else every one after the first counted a byte too many."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = ["To be, or not to be.", "Whether 'tis nobler in the mind", "to suffer the slings", "and arrows."]
    metaspace = Tokenizer(models.BPE(unk_token="<unk>"))
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    metaspace.decoder = decoders.Metaspace(prepend_scheme="first")
    metaspace.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=metaspace, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>")
    stream = TokenStream(encode_texts(tokenizer, texts), prefix=[tokenizer.bos_token_id])
    expected = sum(len(text.encode("utf-8")) for text in texts)
    assert count_bytes(stream, tokenizer) == expected
    assert count_bytes(stream, tokenizer, chunk_tokens=7) == expected


def test_eval_command_writes_json(trained_model, eval_data, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    eval_command.add_arguments(parser)
    out = tmp_path / "results" / "ppl.json"
    args = parser.parse_args([str(trained_model), "--data", str(eval_data), "--stride", "32", "--batch-size", "4",
                              "--max-tokens", "1000", "--out", str(out), "--no-progress"])
    assert eval_command.run(args) == 0
    assert "perplexity" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["tokens"] == 1000 and result["block_size"] == SEQ_LEN  # from the run's train_config.json
    assert result["stride"] == 32 and result["split"] == "val" and result["dtype"] == "float32"
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    assert result["bits_per_byte"] > 0 and result["bytes"] > 1000
    assert {"depthattn_version", "date", "torch_version", "transformers_version"} <= result.keys()


def test_errors_name_the_problem(trained_model, eval_data, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_perplexity(tmp_path / "missing", data=eval_data)
    with pytest.raises(FileNotFoundError, match="holds no saved model"):
        evaluate_perplexity(tmp_path, data=eval_data)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="hold no text"):
        evaluate_perplexity(trained_model, text=[empty], progress=False)
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        evaluate_perplexity(trained_model, text=[tmp_path / "nowhere.txt"], progress=False)
    with pytest.raises(ValueError, match=r"exceeds the model's max_position_embeddings \(256\)"):
        evaluate_perplexity(trained_model, data=eval_data, block_size=512, progress=False)
    with pytest.raises(ValueError, match="stride must lie in"):
        evaluate_perplexity(trained_model, data=eval_data, block_size=16, stride=32, progress=False)
    with pytest.raises(ValueError, match="exactly one of"):
        evaluate_perplexity(trained_model, progress=False)


def test_token_stream_reads_across_prefix_and_shards(eval_data):
    shards = TokenShards(eval_data, "val")
    assert len(shards.shards) > 1
    stream = TokenStream(shards, prefix=[7], max_length=12_000)
    whole = np.concatenate([[7], shards.read(0, 11_999)])
    assert len(stream) == 12_000
    for start, length in [(0, 1), (0, 10), (4990, 30), (11_000, 1000)]:
        assert (stream.read(start, length) == whole[start:start + length]).all()
    with pytest.raises(IndexError):
        stream.read(11_999, 2)


def test_data_with_a_larger_vocabulary_than_the_model_is_a_clear_error(eval_data, tmp_path):
    from depthattn.evaluate.depth_map import compute_depth_map

    small = tmp_path / "small"
    tiny_model().save_pretrained(small)  # 97 ids; the data was tokenized with 384
    with pytest.raises(ValueError, match="tokenized with 384 ids, more than the model's 97"):
        evaluate_perplexity(small, data=eval_data, progress=False)
    with pytest.raises(ValueError, match="tokenized with 384 ids, more than the model's 97"):
        compute_depth_map(small, eval_data, seq_len=16)


@pytest.mark.parametrize("documents, vocab_size, differ", [
    (slice(0, 24), 300, "300 tokens against the model's 384"),  # a smaller vocabulary: every id fits the model
    (slice(24, 48), 384, "of its 384 tokens are not the model's"),  # as many tokens, other ones
])
def test_data_made_with_another_tokenizer_is_a_clear_error(trained_model, eval_data, tmp_path, documents, vocab_size,
                                                           differ):
    from depthattn.evaluate.depth_map import compute_depth_map

    texts = list(itertools.islice(embedded_corpus_documents(), 48))[documents]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    other = tmp_path / "other"
    prepare([str(source)], other, vocab_size=vocab_size, val_fraction=0.2, progress=False)
    def problem(tokenizer):
        return rf"{other} was made with another tokenizer .*{differ}.*prepare --tokenizer {tokenizer} "

    with pytest.raises(ValueError, match=problem(trained_model)):
        evaluate_perplexity(trained_model, data=other, progress=False)
    with pytest.raises(ValueError, match=problem(trained_model)):
        compute_depth_map(trained_model, other, samples=2, seq_len=16)
    with pytest.raises(ValueError, match=problem(eval_data / "tokenizer")):  # --tokenizer: the model's tokenizer
        evaluate_perplexity(trained_model, data=other, tokenizer=eval_data / "tokenizer", progress=False)


def test_a_model_with_a_padded_vocabulary_scores_data_of_its_own_tokenizer(eval_data, tmp_path):
    padded = tmp_path / "padded"
    tiny_model(vocab_size=400).save_pretrained(padded)  # the data's tokenizer has 384 ids
    for item in (eval_data / "tokenizer").iterdir():
        shutil.copy(item, padded / item.name)
    assert evaluate_perplexity(padded, data=eval_data, max_tokens=40, progress=False)["tokens"] == 40


@pytest.mark.parametrize("stride", [8, 3])
def test_per_document_losses_sum_to_the_total_and_match_a_plain_loop(stride):
    model = tiny_model(max_position_embeddings=8)
    eos = 2
    ids = torch.randint(3, model.config.vocab_size, (30,), generator=torch.Generator().manual_seed(3))
    ids[[6, 17, 29]] = eos  # documents: [0, 6], [7, 17], [18, 29]

    class Tokenizer:  # what per-document scoring reads of a tokenizer
        eos_token_id = eos

    with pytest.raises(ValueError, match="need the tokenizer"):
        compute_perplexity(model, ids, block_size=8, stride=stride, documents=True)
    nats_at = np.zeros(len(ids))
    total, count, _ = score_stream(model, TokenStream(ids), 8, stride, nats_at=nats_at)
    nats, tokens = per_document(TokenStream(ids), nats_at, Tokenizer.eos_token_id)
    assert tokens == [6, 11, 12]  # the first token is only context
    assert count == 29 and sum(nats) == pytest.approx(total, rel=1e-6)
    expected, _ = plain_loop(model, ids, 8, stride)  # the plain loop's scored targets, split at each document's end
    assert sum(nats) == pytest.approx(expected, rel=1e-5)
    with torch.no_grad():  # the first document's targets 1..6 are scored within the first window in both strides
        first = F.cross_entropy(model(ids[None, :6]).logits[0].double(), ids[1:7], reduction="sum").item()
    assert nats[0] == pytest.approx(first, rel=1e-5)
