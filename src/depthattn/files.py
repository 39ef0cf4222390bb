"""Crash-safe file writing and reading, for every part of depthattn that writes files.

Every file is written under a temporary name in its final directory, flushed, fsync'ed and then
renamed over the target with os.replace, so a reader never sees a half-written file.
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{16}\.tmp$")  # the names temporary_sibling makes


class NoSpaceLeft(OSError):
    """A write failed because the disk is full; the message names the folder being written."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def is_full_disk(error: BaseException) -> bool:
    """ENOSPC, raised as an OSError or inside a library's own error (safetensors' SafetensorError and tokenizers'
    Exception carry the OS message only)."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return os.strerror(errno.ENOSPC) in str(error)


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    return ""


@contextmanager
def reporting_full_disk(folder: str | os.PathLike, needed: int | None = None):
    """Turn a full disk in the block (ENOSPC, bare or wrapped by safetensors or tokenizers) into NoSpaceLeft naming
    `folder`, its free space and, when the caller knows it, how much the write needs."""
    try:
        yield
    except Exception as error:
        if not is_full_disk(error):
            raise
        free = shutil.disk_usage(folder).free if Path(folder).exists() else 0
        want = f", this write needs about {human_bytes(needed)}" if needed else ""
        raise NoSpaceLeft(errno.ENOSPC, f"no space left on {folder} ({human_bytes(free)} free{want}); free some "
                                        "space and run again") from error


def make_folder(path: str | os.PathLike, option: str = "folder") -> Path:
    """`mkdir -p path`, with a clear error when a file stands where a folder must be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next(p for p in (path, *path.parents) if p.exists() and not p.is_dir())
        raise ValueError(f"{option} {path} cannot be made: {blocker} is a file, not a folder; "
                         f"choose another {option}") from None
    return path


class FolderHeld(RuntimeError):
    """Another process holds `folder` (`folder_held`)."""

    folder: Path  # kept when pickled (an exception's __dict__ is)


@contextmanager
def folder_held(path: str | os.PathLike, option: str = "folder", exclusive: bool = True):
    """`path` (made if missing) held for this process while the block runs: another process asking for it meanwhile
    gets an error instead of writing into the same folder (a second run of one study, a command run twice). Where
    the file system cannot lock a folder (some network file systems), nothing is held. Not `exclusive`: a look that
    fails only where a process holds the folder; several processes look at once (one launch's tasks, before any of
    them holds it)."""
    folder = make_folder(path, option)
    handle = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            held = FolderHeld(f"another process is writing into {folder} (it holds the folder): wait for it to end "
                              f"or stop it, or choose another {option}")
            held.folder = folder
            raise held from None
        except OSError:  # no locks on this file system
            pass
        yield folder
    finally:
        os.close(handle)


def held_elsewhere(path: str | os.PathLike) -> bool:
    """Whether a process holds the folder `path` now (`folder_held`); a missing folder is held by none."""
    if not Path(path).is_dir():
        return False
    try:
        with folder_held(path, exclusive=False):
            return False
    except FolderHeld:
        return True


def check_output(path: str | os.PathLike, option: str = "--out", folder: bool = False) -> None:
    """Before the work that ends in writing `path` (a file, or a folder if `folder`): that it can be written there,
    so that a mistake costs no scoring or training first."""
    path = Path(path)
    if not folder and path.is_dir():
        raise ValueError(f"{option} {path} is a folder; name a file (inside it, or elsewhere)")
    if folder and path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file; name a folder")
    ancestor = next(p for p in path.absolute().parents if p.exists())
    if not ancestor.is_dir():
        raise ValueError(f"{option} {path} cannot be made: {ancestor} is a file, not a folder; choose another {option}")
    if not os.access(ancestor, os.W_OK):
        raise PermissionError(errno.EACCES, "Permission denied (or a read-only file system)", str(path))


def fsync_directory(path: Path) -> None:
    """Persist a rename inside `path` (POSIX needs the directory itself fsync'ed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def naming(path: Path):
    """An OSError about the hidden temporary sibling of `path` (a read-only or denied folder) names `path`."""
    try:
        yield
    except OSError as error:
        if error.errno is None:
            raise
        raise type(error)(error.errno, error.strerror, str(path)) from None


def temporary_sibling(path: Path) -> Path:
    """A fresh hidden name next to `path` (same directory, so os.replace is an atomic rename)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


class AtomicFile:
    """A binary file written under a temporary name and renamed to `path` on commit(); missing parent
    directories are made."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a folder, not a file; name a file (inside it, or elsewhere)")
        make_folder(self.path.parent)
        self.temp_path = temporary_sibling(self.path)
        with naming(self.path):
            self.file = open(self.temp_path, "xb")  # noqa: SIM115  (open until commit or abort)

    def write(self, data: bytes) -> None:
        with reporting_full_disk(self.path.parent):
            self.file.write(data)

    def commit(self) -> None:
        with reporting_full_disk(self.path.parent):
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
        os.replace(self.temp_path, self.path)
        fsync_directory(self.path.parent)

    def discard(self) -> None:
        with contextlib.suppress(OSError):  # closing flushes the buffer, which fails again on a full disk
            self.file.close()
        self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> "AtomicFile":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is not None:
            self.discard()
            return
        try:
            self.commit()
        except BaseException:
            self.discard()
            raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with AtomicFile(path) as file:
        file.write(data)


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


@contextmanager
def atomic_directory(path: str | os.PathLike, needed: int | None = None):
    """Yield a temporary sibling directory to fill; on success it replaces `path` as a whole.

    An old `path` is renamed aside first and deleted after the swap, so that a crash at any moment leaves
    the old or the new folder whole (the old one perhaps under a hidden temporary name). A full disk is
    NoSpaceLeft naming the folder (and `needed`, the bytes the caller expects to write)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file, not a folder; remove it or name another folder")
    make_folder(path.parent)
    temp_dir = temporary_sibling(path)
    with naming(path):
        temp_dir.mkdir()
    try:
        with reporting_full_disk(path.parent, needed):
            yield temp_dir
            for child in temp_dir.rglob("*"):
                if child.is_file():
                    with open(child, "rb") as file:
                        os.fsync(file.fileno())
        old = temporary_sibling(path)
        if path.exists():
            os.replace(path, old)
        os.replace(temp_dir, path)
        fsync_directory(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise


def remove_temporaries(folder: str | os.PathLike) -> None:
    """Delete what a killed process left of its atomic writes in `folder` (hidden temporary files and folders).

    Only for folders that a single process writes, such as a training run's."""
    folder = Path(folder)
    if folder.is_dir():
        for leftover in (p for p in folder.iterdir() if _TEMPORARY.match(p.name)):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def read_json_object(path: str | os.PathLike) -> dict:
    """The JSON object in `path`, with a one-line error naming the file and what is wrong with it."""
    path = Path(path)
    fix = "fix it or restore the original file"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; restore the original file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"{path} cannot be read ({error.strerror or error}); check its permissions") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; {fix}") from None
    if not text.strip():
        raise ValueError(f"{path} is empty; {fix}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
                         f"{fix}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not an object; {fix}")
    return data


def read_records(path: str | os.PathLike) -> list[dict]:
    """The records of a JSON-lines file. A torn last line (a write cut short by a crash or a full disk) is
    dropped with a notice; a bad line before it is an error naming the file and the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte {error.start}), so not a JSON-lines file") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            if number < len(lines):
                raise ValueError(f"{path}, line {number}: not valid JSON ({error}); fix or delete that line") from None
            print(f"note: {path}: dropped its last line, cut short by an interrupted write: {line[:60]!r}",
                  file=sys.stderr)
            continue
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: a JSON {type(record).__name__}, not a record (an object)")
        records.append(record)
    return records
