"""The data pipeline's error type and crash-safe file writing.

Every file is written under a temporary name in its final directory, flushed, fsync'ed and then
renamed over the target with os.replace, so a reader never sees a half-written file.
"""

import hashlib
import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path


class DataError(ValueError):
    """Bad input data or a broken dataset directory; the message names the file, the problem and the fix."""


def fsync_directory(path: Path) -> None:
    """Persist a rename inside `path` (POSIX needs the directory itself fsync'ed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporary_sibling(path: Path) -> Path:
    """A fresh hidden name next to `path` (same directory, so os.replace is an atomic rename)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


class AtomicFile:
    """A binary file written under a temporary name and renamed to `path` on commit(); missing parent
    directories are made."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.temp_path = temporary_sibling(self.path)
        self.file = open(self.temp_path, "xb")

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def commit(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.temp_path, self.path)
        fsync_directory(self.path.parent)

    def discard(self) -> None:
        self.file.close()
        self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> "AtomicFile":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with AtomicFile(path) as file:
        file.write(data)


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


@contextmanager
def atomic_directory(path: str | os.PathLike):
    """Yield a temporary sibling directory to fill; on success it replaces `path` as a whole."""
    path = Path(path)
    temp_dir = temporary_sibling(path)
    temp_dir.mkdir()
    try:
        yield temp_dir
        for child in temp_dir.iterdir():
            with open(child, "rb") as file:  # save_pretrained writes plain files only
                os.fsync(file.fileno())
        if path.exists():
            shutil.rmtree(path)
        os.replace(temp_dir, path)
        fsync_directory(path.parent)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
