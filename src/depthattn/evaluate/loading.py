"""Loading a saved model folder and its tokenizer for evaluation, and the metadata recorded with every result.

Everything is read from local folders (`local_files_only`): evaluation never downloads a model or a tokenizer.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = (*DTYPES, "auto")


def check_model_dir(model_dir: str | os.PathLike) -> Path:
    """`model_dir` as a Path, after checking that it holds a saved model (config.json)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {path} does not exist; pass a folder written by train "
                                "(e.g. runs/tiny/depth_attention/final) or by save_pretrained")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} holds no saved model (config.json); pass a folder written by train "
                                "(e.g. runs/tiny/depth_attention/final) or by save_pretrained")
    return path


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(model_dir: str | os.PathLike, dtype: str = "float32", device: str | None = None):
    """A saved causal LM (any transformers model; depthattn models are registered on import) in eval mode.

    dtype: float32, bfloat16, float16, or auto (the dtype recorded in the saved config).
    """
    import depthattn  # noqa: F401  (registers the depth_attention model type with the Auto classes)
    from transformers import AutoModelForCausalLM

    path = check_model_dir(model_dir)
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_CHOICES)}")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES.get(dtype, "auto"), local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"could not load a causal language model from {path}: {error}") from error
    return model.to(device or default_device()).eval()


def check_data_vocab(shards, model, data) -> None:
    """A clear error when prepared data holds token ids beyond the model's vocabulary."""
    if shards.vocab_size > model.config.vocab_size:
        raise ValueError(f"{data} was tokenized with {shards.vocab_size} ids, more than the model's "
                         f"{model.config.vocab_size}: pass the dataset the model was trained on")


def model_dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def find_tokenizer(model_dir: str | os.PathLike | None, tokenizer: str | os.PathLike | None = None,
                   fallbacks: tuple[str | os.PathLike, ...] = ()):
    """The tokenizer in `tokenizer` if given, else the one saved with the model (train exports it), else the
    first of `fallbacks` (e.g. a prepared dataset's tokenizer/ folder) that holds one."""
    from ..data.tokenizer import load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    candidates = ([Path(model_dir)] if model_dir is not None else []) + [Path(f) for f in fallbacks]
    for candidate in candidates:
        if any((candidate / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            return load_tokenizer(candidate)
    raise FileNotFoundError(
        f"no tokenizer in {', '.join(map(str, candidates)) or 'the model folder'}; pass --tokenizer DIR "
        "(e.g. the tokenizer/ folder of the prepared dataset the model was trained on)")


def check_vocab(model, tokenizer) -> None:
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} ids but the model only {model.config.vocab_size}: "
                         "they do not belong together; pass the model's own tokenizer with --tokenizer")


def max_positions_of(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    return None


def default_context_length(model_dir: str | os.PathLike, max_positions: int | None, fallback: int = 2048) -> int:
    """The training sequence length when the model folder sits in a training run (train_config.json in it or
    above it, as `depthattn train` writes), else the model's max_position_embeddings (else `fallback`)."""
    model_dir = Path(model_dir)
    for config_path in (model_dir / "train_config.json", model_dir.parent / "train_config.json"):
        try:
            seq_len = json.loads(config_path.read_text())["data"]["seq_len"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(seq_len, int) and 0 < seq_len <= (max_positions or seq_len):
            return seq_len
    return max_positions or fallback


def run_metadata() -> dict:
    """Versions and time of an evaluation run, recorded with its results."""
    import transformers

    import depthattn

    return {
        "depthattn_version": depthattn.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
