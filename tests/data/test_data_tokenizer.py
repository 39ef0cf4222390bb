"""Byte-level BPE training, saving and loading."""

import pytest
from transformers import AutoTokenizer

from depthattn.data import EOS_TOKEN, PAD_TOKEN, DataError, load_tokenizer, train_bpe_tokenizer


def test_training_is_deterministic_and_loads_with_auto_tokenizer(tmp_path, small_docs):
    train_bpe_tokenizer(small_docs, 300, tmp_path / "a")
    train_bpe_tokenizer(iter(small_docs), 300, tmp_path / "b")
    train_bpe_tokenizer(small_docs, 320, tmp_path / "c")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() != (tmp_path / "c" / "tokenizer.json").read_bytes()

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a", local_files_only=True)
    assert len(tokenizer) == 300
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (EOS_TOKEN, 0)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == (PAD_TOKEN, 1)
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary directories are gone


def test_any_text_round_trips_exactly(tmp_path, small_docs):
    tokenizer = train_bpe_tokenizer(small_docs, 300, tmp_path / "tok")
    text = "  Ünïcødé — 日本語\ttabs,\r\n spaces  .  , emoji 🙂 and 'quotes' \n\n"
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(token_ids) == text
    assert max(token_ids) < 300


def test_vocab_size_below_byte_alphabet_is_refused(tmp_path):
    with pytest.raises(DataError, match="vocab_size 100 is too small.*at least 258"):
        train_bpe_tokenizer(["text"], 100, tmp_path / "tok")


def test_load_tokenizer_errors_name_the_directory(tmp_path):
    with pytest.raises(DataError, match="tokenizer directory not found: .*nowhere"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty holds no tokenizer.json or tokenizer_config.json"):
        load_tokenizer(tmp_path / "empty")
