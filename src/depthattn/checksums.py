"""A model folder's checksums.json: the sha256 of every file, so that damaged weights are refused and edited text
files (a chat template, a config) are named once."""

import json
import os
import sys
from pathlib import Path

from .files import atomic_write_json, sha256_file

CHECKSUMS = "checksums.json"

# files whose bytes are tensors: a checksum mismatch there is damage; any other file (config, tokenizer, chat
# template) is text that people edit
WEIGHTS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".npy", ".npz")
_warned: set[tuple[Path, tuple[str, ...]]] = set()  # the edited-files warnings given, each once per process


def is_weights_file(name: str) -> bool:
    return name.endswith(WEIGHTS_SUFFIXES)


def write_checksums(folder: str | os.PathLike) -> None:
    """checksums.json in `folder`: the sha256 of every other file in it, written last."""
    folder = Path(folder)
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != CHECKSUMS)
    atomic_write_json(folder / CHECKSUMS, {"sha256": {name: sha256_file(folder / name) for name in files}})


def recorded_checksums(folder: str | os.PathLike) -> dict[str, str] | None:
    """The sha256 per file that checksums.json in `folder` records; None without one."""
    path = Path(folder) / CHECKSUMS
    if not path.is_file():
        return None
    try:
        expected = json.loads(path.read_text())["sha256"]
        if not all(isinstance(name, str) and isinstance(digest, str) for name, digest in expected.items()):
            raise TypeError("names and digests must be strings")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{CHECKSUMS} is unreadable ({error})") from None
    return expected


def checksum_problems(folder: str | os.PathLike, which=None) -> list[str]:
    """The files of `folder` that are missing or differ from checksums.json (empty without one); `which(name)`,
    when given, picks the recorded files to check."""
    folder = Path(folder)
    try:
        expected = recorded_checksums(folder) or {}
    except ValueError as error:
        return [str(error)]
    return [f"{name} is missing" if not (folder / name).is_file() else f"{name} differs from its sha256"
            for name, digest in expected.items() if which is None or which(name)
            if not (folder / name).is_file() or sha256_file(folder / name) != digest]


def damaged_weights(folder: str | os.PathLike) -> list[str]:
    """checksum_problems of the weights files alone (and of an unreadable checksums.json)."""
    return checksum_problems(folder, is_weights_file)


def edited_files(folder: str | os.PathLike) -> list[str]:
    """The text files of `folder` (all but weights) changed since checksums.json was written, each with how:
    "name (differs)", "name (missing)" or "name (new)". Empty without a readable checksums.json."""
    folder = Path(folder)
    try:
        expected = recorded_checksums(folder)
    except ValueError:
        return []
    if expected is None:
        return []
    changed = [f"{name} ({'differs' if (folder / name).is_file() else 'missing'})"
               for name, digest in expected.items() if not is_weights_file(name)
               if not (folder / name).is_file() or sha256_file(folder / name) != digest]
    new = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in expected
                 and p.name != CHECKSUMS and not p.name.startswith("."))
    return changed + [f"{name} (new)" for name in new]


def check_checksums(folder: str | os.PathLike, label: str = "") -> None:
    """Refuse `folder` when its weights are missing or differ from checksums.json (damage); when only its text
    files changed (an added chat template, an edited config), say so once on stderr and go on."""
    damaged = damaged_weights(folder)
    if damaged:
        raise ValueError(f"{label}{folder} is damaged: {'; '.join(damaged)} ({CHECKSUMS}); use an intact copy")
    edited = tuple(edited_files(folder))
    key = (Path(folder).resolve(), edited)
    if edited and key not in _warned:
        _warned.add(key)
        print(f"warning: {folder}: text files changed since {CHECKSUMS} was recorded: {', '.join(edited)}; the "
              f"weights match theirs and load as usual; to record the files as they are now: depthattn checksums "
              f"{folder}", file=sys.stderr)
