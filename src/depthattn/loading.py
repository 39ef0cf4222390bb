"""Loading a saved model folder and its tokenizer for any command, and the metadata recorded with every result.

Everything is read from local folders (`local_files_only`): evaluation never downloads a model or a tokenizer.
Every command that reads a model folder opens it with `open_model`. This module imports nothing from train/:
training depends on loading (its checkpoints' checks), never the reverse.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import json
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import transformers

import depthattn  # the package itself: registered with the Auto classes, and its version

from .checkpoint_shapes import CONFIG_FIX, config_value, fields_behind, meta_shapes, saved_shapes
from .checksums import check_checksums
from .config import RENAMED_METHODS, missing_method
from .data.tokenizer import load_tokenizer
from .files import read_json_object
from .methods import DESCRIPTIONS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = (*DTYPES, "auto")


def quiet_loading_bars() -> None:
    """For a command that reads local model folders: transformers' own progress bars ("Loading weights" at every
    load) off, in this process and the ones it starts (transformers' server loads its model in its own from 5.25).
    Warnings still show, and the command's own bars (eval's scoring) are plain tqdm's, which stay."""
    transformers.utils.logging.disable_progress_bar()
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # what a started process's transformers reads at import


def check_model_dir(model_dir: str | os.PathLike) -> Path:
    """`model_dir` as a Path, after checking that it holds a saved model (config.json)."""
    path = Path(model_dir)
    if path.is_file():
        raise ValueError(f"{path} is a file, not a model folder; pass the folder that holds it and config.json "
                         "(e.g. runs/tiny/depth_attention/final)")
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {path} does not exist; pass a folder written by train "
                                "(e.g. runs/tiny/depth_attention/final) or by save_pretrained")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} holds no saved model (config.json); pass a folder written by train "
                                "(e.g. runs/tiny/depth_attention/final) or by save_pretrained")
    return path


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> torch.device:
    """`device` (default: cuda if available) as a torch.device, after checking that this machine has it."""
    try:
        resolved = torch.device(device or default_device())
    except RuntimeError:
        raise ValueError(f"--device {device!r} is not a device; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
    if resolved.type == "cuda" and (resolved.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return resolved


def nonfinite_tensors(tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of the floating-point tensors that hold a NaN or an infinity, of a state dict or of (name, tensor)
    pairs (read one at a time, e.g. from a safetensors file)."""
    pairs = tensors.items() if isinstance(tensors, Mapping) else tensors
    return [name for name, tensor in pairs if tensor.is_floating_point() and not tensor.isfinite().all()]


def _listed(names) -> str:
    names = sorted(map(str, names))
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_saved_model(model_dir: str | os.PathLike) -> Path:
    """`model_dir` as a Path, after checking that it holds a depthattn model whose weights match their checksums
    (where the folder records them); text files edited since (a chat template added) get one warning."""
    path = check_model_dir(model_dir)
    check_model_type(path)
    check_checksums(path)
    return path


def check_model_type(path: Path) -> None:
    model_type = read_json_object(path / "config.json").get("model_type")
    if model_type != depthattn.DepthAttentionConfig.model_type:
        raise ValueError(f"{path} holds a {model_type!r} model, not a depthattn one (model_type "
                         f"{depthattn.DepthAttentionConfig.model_type!r}); convert a Llama, Mistral, Qwen2 or "
                         "Qwen3 model first: depthattn convert SRC_DIR OUT_DIR")


def load_model(model_dir: str | os.PathLike, dtype: str = "float32", device: str | None = None,
               method_fields: Mapping[str, object] | None = None):
    """A saved depthattn model in eval mode, refused unless its files match their checksums (where the folder
    records them), every tensor of the model is in the weights with its shape, no other tensor is, and all
    are finite.

    dtype: float32, bfloat16, float16, or auto (the dtype recorded in the saved config).
    method_fields: values of fields that the method switches (its `switchable_fields`, e.g. {"depth_impl": "cpu"}),
    over the saved config's (`DepthAttentionPreTrainedModel.switch_method_field`).
    """
    path = check_saved_model(model_dir)
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_CHOICES)}")
    target = resolve_device(device)
    check_shapes_fit(path)
    try:
        loaded: Any = transformers.AutoModelForCausalLM.from_pretrained(  # (model, info): output_loading_info
            path, dtype=DTYPES.get(dtype, "auto"), local_files_only=True, output_loading_info=True,
            ignore_mismatched_sizes=True, use_kernels=False)  # 5.25 on: Hub kernels by default, never here
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"could not load a causal language model from {path}: {error}") from error
    model, info = loaded
    _check_fit(path, model.config, info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"])
    nonfinite = nonfinite_tensors(model.state_dict())
    if nonfinite:
        raise ValueError(f"{path} holds NaN or infinite weights in {_listed(nonfinite)}: the run that wrote it "
                         "diverged; use an earlier checkpoint")
    for name, value in (method_fields or {}).items():
        model.switch_method_field(name, value)
    return model.to(target).eval()


def parse_method_fields(assignments: Iterable[str]) -> dict[str, object]:
    """`NAME=VALUE` assignments (`--method-field`) of fields that a method switches (its `switchable_fields`), as
    `load_model` takes them: each value a Python literal where the field's default is not a string. Whether the
    loaded model's method switches them, and to these values, is checked when they are set."""
    defaults = {name: method.config_fields[name].default for method in DESCRIPTIONS.values()
                for name in method.switchable_fields}
    fields = {}
    for assignment in assignments:
        name, equals, text = assignment.partition("=")
        if not equals or name not in defaults:
            raise ValueError(f"--method-field {assignment!r}: give NAME=VALUE, NAME a field that a method switches "
                             f"({', '.join(sorted(defaults)) or 'none'}; the others change what a model computes)")
        fields[name] = text if isinstance(defaults[name], str) else _literal(name, text, defaults[name])
    return fields


def _literal(name: str, text: str, default):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"--method-field {name}={text}: not a Python literal, as {name}'s values are (its default: "
                         f"{default!r})") from None


@dataclasses.dataclass
class OpenedModel:
    """A model folder opened for a command (`open_model`): its path, the model in eval mode and, once found, its
    tokenizer (checked against the model's vocabulary)."""

    path: Path
    model: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase | None = None

    @property
    def max_positions(self) -> int | None:
        """The longest context the model takes (max_position_embeddings), if its config gives one."""
        return max_positions_of(self.model.config)

    def default_context_length(self) -> int:
        """The training seq_len when the folder sits in a training run, else the model's max_position_embeddings."""
        return default_context_length(self.path, self.max_positions)

    def load_tokenizer(self, tokenizer: str | os.PathLike | None = None,
                       fallbacks: tuple[str | os.PathLike, ...] = ()):
        """The tokenizer (`find_tokenizer`: `tokenizer`, else the folder's, else the first of `fallbacks`), refused
        when it has more ids than the model; kept as `self.tokenizer`."""
        return self.use_tokenizer(find_tokenizer(self.path, tokenizer, fallbacks))

    def use_tokenizer(self, tokenizer):
        """`tokenizer` as `self.tokenizer`, once checked to have no more ids than the model."""
        check_vocab(self.model, tokenizer)
        self.tokenizer = tokenizer
        return tokenizer


def open_model(model_dir: str | os.PathLike, *, dtype: str = "float32", device: str | None = None,
               method_fields: Mapping[str, object] | None = None, tokenizer: str | os.PathLike | None = None,
               with_tokenizer: bool = True) -> OpenedModel:
    """A saved model folder opened the way every command that reads one needs it: the folder checked
    (`check_model_dir`), its tokenizer found before the weights are read (`tokenizer`, else the folder's own),
    the model loaded and checked (`load_model`: checksums, model type, tensors, finiteness, dtype, device,
    method_fields), and the tokenizer checked against its vocabulary.

    with_tokenizer=False leaves the tokenizer to `OpenedModel.load_tokenizer`, for a command that finds it
    elsewhere too (eval: the prepared dataset's) or needs none (depth-map)."""
    path = check_model_dir(model_dir)
    check_model_type(path)
    load_config(path)  # a broken config named before the tokenizer, which reads it too, is loaded
    found = find_tokenizer(path, tokenizer) if with_tokenizer else None
    opened = OpenedModel(path, load_model(path, dtype, device, method_fields))
    if found is not None:
        opened.use_tokenizer(found)
    return opened


def load_config(path: Path) -> depthattn.DepthAttentionConfig:
    """The depthattn config in `path`, or an error naming its config.json and what is wrong with it."""
    try:
        return depthattn.DepthAttentionConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(_missing_method(path, error) or f"{path / 'config.json'} is not a valid depthattn config "
                         f"({error}); fix it or restore the original file") from None


def check_shapes_fit(path: Path) -> None:
    """Before anything is loaded: every safetensors tensor of the model in `path` has the shape its config.json
    gives (read from the files' headers), and the weights files are there and readable."""
    saved = saved_shapes(path)
    if saved is None:  # weights in another format: checked once loaded
        return
    config = load_config(path)
    needed = meta_shapes(depthattn.DepthAttentionForCausalLM, config)
    _check_fit(path, config, [], [], [(name, saved[name], shape) for name, shape in needed.items()
                                      if name in saved and tuple(saved[name]) != shape])


def _missing_method(path: Path, error: Exception) -> str | None:
    """Where config.json names a cross-layer method this process does not know: which, and how to get it."""
    name = read_json_object(path / "config.json").get("cross_layer") if "cross_layer" in str(error) else None
    if not isinstance(name, str) or name in DESCRIPTIONS or name in RENAMED_METHODS:
        return None
    return f"{path / 'config.json'} names {missing_method(name)}"


def _check_fit(path: Path, config, missing, unexpected, mismatched) -> None:
    problems = [f"{what}: {_listed(names)}" for what, names in (
        ("missing", missing), ("unexpected", unexpected),
        ("of the wrong shape", [f"{key} {tuple(saved)} (needs {tuple(needed)})"
                                for key, saved, needed in mismatched])) if names]
    if problems:
        raise ValueError(f"the weights in {path} do not fit its config.json, tensors {'; '.join(problems)}: "
                         f"{_mismatch_fix(config, mismatched)}")


def _mismatch_fix(config, mismatched) -> str:
    """What to do about tensors that do not fit the config: when shapes differ, the config fields behind them."""
    if not mismatched:
        return "pass a folder written by train or by save_pretrained, unchanged"
    key, saved, needed = sorted(mismatched)[0]
    fields = ", ".join(f"{f}={config_value(config, f)}" for f in fields_behind(key, tuple(saved), tuple(needed)))
    return (f"config.json{' ' + fields if fields else ''} does not describe these weights; {CONFIG_FIX}, or pass "
            "a folder written by train or by save_pretrained, unchanged")


def check_data_vocab(shards, model, data) -> None:
    """A clear error when prepared data holds token ids beyond the model's vocabulary."""
    if shards.vocab_size > model.config.vocab_size:
        raise ValueError(f"{data} was tokenized with {shards.vocab_size} ids, more than the model's "
                         f"{model.config.vocab_size}: pass the dataset the model was trained on")


def check_data_tokenizer(shards, data, tokenizer) -> None:
    """A clear error when prepared data was made with another tokenizer than `tokenizer`, the model's (its folder's,
    or --tokenizer): its ids would mean other text to the model, even where they all fit its vocabulary. The
    vocabularies are compared, not their sizes: a model's vocab_size may exceed its tokenizer's (padded), and a
    tokenizer saved again (prepare --tokenizer) keeps its vocabulary, not its files' bytes."""
    if not holds_tokenizer(shards.tokenizer_path):  # a dataset without its tokenizer: the ids are all we have
        return
    theirs = load_tokenizer(shards.tokenizer_path).get_vocab()
    ours = tokenizer.get_vocab()
    if theirs == ours:
        return
    differ = (f"{len(theirs)} tokens against the model's {len(ours)}" if len(theirs) != len(ours) else
              f"{len(set(theirs.items()) - set(ours.items()))} of its {len(theirs)} tokens are not the model's")
    raise ValueError(f"{data} was made with another tokenizer ({shards.tokenizer_path}) than the model's "
                     f"({tokenizer.name_or_path}): {differ}, so its token ids would be scored as other text. Pass a "
                     "dataset prepared with the model's tokenizer (depthattn prepare --tokenizer "
                     f"{tokenizer.name_or_path} ...), or the dataset the model was trained on")


def model_dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def find_tokenizer(model_dir: str | os.PathLike | None, tokenizer: str | os.PathLike | None = None,
                   fallbacks: tuple[str | os.PathLike, ...] = ()):
    """The tokenizer in `tokenizer` if given, else the one saved with the model (train exports it), else the
    first of `fallbacks` (e.g. a prepared dataset's tokenizer/ folder) that holds one."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    candidates = ([Path(model_dir)] if model_dir is not None else []) + [Path(f) for f in fallbacks]
    for candidate in candidates:
        if holds_tokenizer(candidate):
            if (candidate / "config.json").is_file():  # transformers reads it too: a broken one named clearly
                read_json_object(candidate / "config.json")
            return load_tokenizer(candidate)
    raise FileNotFoundError(
        f"no tokenizer in {', '.join(map(str, candidates)) or 'the model folder'}; pass --tokenizer DIR "
        "(e.g. the tokenizer/ folder of the prepared dataset the model was trained on)")


def holds_tokenizer(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a saved Hugging Face tokenizer."""
    return any((Path(folder) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))


def check_vocab(model, tokenizer) -> None:
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} ids but the model only {model.config.vocab_size}: "
                         "they do not belong together; pass the model's own tokenizer with --tokenizer")


def max_positions_of(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    return None


def train_config_paths(model_dir: str | os.PathLike) -> list[Path]:
    """Where the train_config.json of the run a model folder sits in would be: in it, above it as for final/, or
    two above a checkpoint in checkpoints/, as `depthattn train` writes them."""
    model_dir = Path(model_dir)
    runs = [model_dir, model_dir.parent] + ([model_dir.parent.parent] if model_dir.parent.name == "checkpoints" else [])
    return [run / "train_config.json" for run in runs]


def default_context_length(model_dir: str | os.PathLike, max_positions: int | None, fallback: int = 2048) -> int:
    """The training sequence length when the model folder sits in a training run (`train_config_paths`), else the
    model's max_position_embeddings (else `fallback`)."""
    for config_path in train_config_paths(model_dir):
        try:
            seq_len = json.loads(config_path.read_text())["data"]["seq_len"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(seq_len, int) and 0 < seq_len <= (max_positions or seq_len):
            return seq_len
    return max_positions or fallback


def run_metadata() -> dict:
    """Versions and time of an evaluation run, recorded with its results."""
    return {
        "depthattn_version": depthattn.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
