"""`depthattn checksums`: record a model folder's checksums (checksums.json) again after its text files were edited
(a chat template added, a generation config changed), once its weights are checked: intact, fitting config.json and
finite."""

from __future__ import annotations

import argparse
from pathlib import Path

from safetensors import safe_open

from ..checkpoint_shapes import check_shapes, first_line, meta_shapes, saved_shapes, weights_files
from ..checksums import CHECKSUMS, damaged_weights, edited_files, recorded_checksums, write_checksums
from ..config import DepthAttentionConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL_DIR", help="a model folder written by train or convert whose text "
                                                           "files (config, tokenizer, chat template) were edited")


def run(args: argparse.Namespace) -> int:
    from ..loading import check_model_dir, check_model_type

    path = check_model_dir(args.model)
    check_model_type(path)
    check_recorded_weights(path)
    check_weights_fit(path)
    changed = edited_files(path)
    try:
        write_checksums(path)
    except PermissionError:
        raise ValueError(f"cannot write {path / CHECKSUMS}: permission denied; run as the folder's owner") from None
    print(f"{path}: {CHECKSUMS} records the files as they are now ("
          + (f"changed: {', '.join(changed)}" if changed else "nothing had changed") + ")")
    return 0


def check_recorded_weights(path: Path) -> None:
    """Refuse weights that differ from the checksums recorded for them: they are damaged, not edited."""
    try:
        recorded_checksums(path)
    except ValueError as error:
        raise ValueError(f"{path}: {error}; delete it and run depthattn checksums {path} again to record the files "
                         "as they are") from None
    damaged = damaged_weights(path)
    if damaged:
        raise ValueError(f"{path} is damaged: {'; '.join(damaged)} ({CHECKSUMS}), so its checksums are not "
                         "recorded again; use an intact copy")


def check_weights_fit(path: Path) -> None:
    """Refuse weights whose shapes do not fit config.json, or that hold NaN or infinite values."""
    from ..modeling import DepthAttentionForCausalLM

    try:
        config = DepthAttentionConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{path / 'config.json'} is not a valid depthattn config ({first_line(error)}); "
                         "fix it") from None
    saved = saved_shapes(path)
    if saved is None:  # weights in another format than safetensors: their checksums are all there is to check
        return
    check_shapes(saved, meta_shapes(DepthAttentionForCausalLM, config), config, str(path / "config.json"))
    nonfinite = [name for file in weights_files(path) for name in nonfinite_in_file(file)]
    if nonfinite:
        raise ValueError(f"{path} holds NaN or infinite weights in {', '.join(nonfinite[:5])}, so its checksums are "
                         "not recorded again: the run that wrote it diverged; use an earlier checkpoint")


def nonfinite_in_file(file: Path) -> list[str]:
    """The floating-point tensors of a safetensors file that hold a NaN or an infinity, read one at a time."""
    from ..loading import nonfinite_tensors

    with safe_open(file, framework="pt") as weights:
        return nonfinite_tensors((name, weights.get_tensor(name)) for name in weights.keys())  # noqa: SIM118  (safe_open: keys(), no __iter__)
