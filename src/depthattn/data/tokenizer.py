"""Train a byte-level BPE tokenizer, or build a word-level one; save and load Hugging Face tokenizer directories."""

import os
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..files import atomic_directory
from .errors import DataError

EOS_TOKEN = "<|endoftext|>"  # appended to every document, so it also separates documents
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN]  # ids 0 and 1
UNK_TOKEN = "<|unk|>"  # word-level tokenizers only: a byte-level BPE has a token for every byte
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)  # the byte alphabet plus the special tokens


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Train a byte-level BPE on `texts` and save it to `out_dir` as a Hugging Face tokenizer directory.

    GPT-2 style: text is split into words by the byte-level regex and every byte has a token, so any
    text encodes and decodes back exactly. Deterministic: the same texts and vocab_size give the
    same tokenizer.json. The vocabulary is smaller than vocab_size if the texts run out of merges.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise DataError(
            f"vocab_size {vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE} "
            f"(256 bytes + {len(SPECIAL_TOKENS)} special tokens). Raise --vocab-size."
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, clean_up_tokenization_spaces=False
    )
    save_tokenizer(hf_tokenizer, out_dir)
    return hf_tokenizer


def word_level_tokenizer(words: list[str]) -> PreTrainedTokenizerBase:
    """One token per word of `words` (ids after the special tokens and UNK_TOKEN), split at whitespace: every token
    decodes to a whole word, so a prompt of n known words is exactly n tokens and streamed tokens join to the full
    decode. For tests and the serving benchmark."""
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, UNK_TOKEN, *words])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                   unk_token=UNK_TOKEN)


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, out_dir: str | os.PathLike) -> None:
    """save_pretrained into a temporary directory that then replaces `out_dir` whole."""
    with atomic_directory(out_dir) as temp_dir:
        tokenizer.save_pretrained(temp_dir)


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Load a local Hugging Face tokenizer directory (never downloads)."""
    path = Path(path)
    fix = (
        "Pass a local Hugging Face tokenizer directory (tokenizer.json and tokenizer_config.json), "
        "such as the tokenizer/ folder that `depthattn prepare` writes."
    )
    if not path.is_dir():
        raise DataError(f"tokenizer directory not found: {path}. {fix}")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise DataError(f"{path} holds no tokenizer.json or tokenizer_config.json. {fix}")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise DataError(f"could not load a tokenizer from {path}: {error}. {fix}") from error


def start_token_id(tokenizer) -> int:
    """The token a new document starts with: BOS, else EOS (which ends every document)."""
    token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if token is None or tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token, which starts and ends every document here; "
                         'set "eos_token" in its tokenizer_config.json')
    return token
