"""The `linux-doc` input: the Linux kernel's documentation in English, one document per source file.

The Debian package linux-doc-6.1 (`apt-get install linux-doc-6.1`; Debian 12's 6.1 kernel) ships the
reStructuredText sources of the kernel's documentation as usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt:
about 2,840 English files, 21 MB, beside the translations under _sources/translations/, which are not English and
are left out. Each file is read as a text file is (sources.read_text_file: cut at blank lines into chunks of about
--chunk-chars characters, a shorter file being one document), in sorted order of its path.

Held out are whole files: a file goes to val when the seeded hash of its path below _sources/ is below
val_fraction (encode.document_split of the path instead of the text), so all of a file's documents land in one
split, and a file keeps its split when files are added or others change.

The manifest records the package's version (dpkg-query), the number of files, a sha256 of the list of files and
their contents (sources_checksum), and the licence. The kernel's documentation is GPL-2.0, some files CC-BY-4.0
(each says so in its SPDX line): it is training text for the user's own machine, not for committing.

DEPTHATTN_LINUX_DOC_DIR, when set, names a folder to read in place of the package's _sources/ (a copy, or a small
slice in the same layout); nothing is installed by this module.
"""

import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from .encode import document_split
from .errors import DataError

PACKAGE = "linux-doc-6.1"
INSTALL = f"apt-get install {PACKAGE}"
SOURCES_DIR = Path(f"/usr/share/doc/{PACKAGE}/html/_sources")
DIR_VARIABLE = "DEPTHATTN_LINUX_DOC_DIR"
SUFFIX = ".rst.txt"
SKIPPED = "translations"  # the folder below _sources/ of the documentation in other languages
LICENSE = "GPL-2.0, some files CC-BY-4.0 (each file's SPDX-License-Identifier line says which)"
ATTRIBUTION = "The Linux kernel's documentation, by the kernel's developers"


def documentation_dir() -> Path:
    """The folder to read: DEPTHATTN_LINUX_DOC_DIR, else the installed package's _sources/."""
    if os.environ.get(DIR_VARIABLE):
        path = Path(os.environ[DIR_VARIABLE])
        if not path.is_dir():
            raise DataError(f"{DIR_VARIABLE}={path} is not a folder. Point it at a copy of {SOURCES_DIR}, or unset "
                            f"it to read the installed package ({INSTALL}).")
        return path
    if not SOURCES_DIR.is_dir():
        raise DataError(f"input linux-doc needs the Debian package {PACKAGE}, which ships the kernel's documentation "
                        f"in {SOURCES_DIR} and is not installed: {INSTALL} (as root), or set {DIR_VARIABLE} to a "
                        "copy of that folder.")
    return SOURCES_DIR


def documentation_files(root: Path) -> list[Path]:
    """The English documentation files below `root`: every *.rst.txt but those under translations/, sorted by
    their path below `root`."""
    if (root / "_sources").is_dir():  # html/ (or above): read as is, translations would come in via _sources/
        raise DataError(f"{root} holds the documentation's _sources folder, not its files: point {DIR_VARIABLE} at "
                        f"{root / '_sources'}.")
    files = sorted(path for path in root.rglob(f"*{SUFFIX}")
                   if path.is_file() and path.relative_to(root).parts[0] != SKIPPED)
    if not files:
        raise DataError(f"{root} holds no {SUFFIX} file outside {SKIPPED}/: it is not the documentation's _sources "
                        f"folder. Reinstall the package ({INSTALL} --reinstall) or point {DIR_VARIABLE} at one.")
    return files


def relative_name(path: Path, root: Path) -> str:
    """The file's path below `root`, with forward slashes: what its split is drawn from."""
    return path.relative_to(root).as_posix()


def sources_checksum(root: Path, files: Iterable[Path]) -> str:
    """sha256 over each file's relative path and the sha256 of its bytes, one line each in order: it changes
    when a file is added, removed, renamed or edited."""
    listing = hashlib.sha256()
    for path in files:
        listing.update(f"{relative_name(path, root)}\t{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return listing.hexdigest()


def package_version() -> str | None:
    """The installed version of the package (dpkg-query), or None where dpkg does not know it."""
    try:
        found = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True)
    except OSError:  # no dpkg on this system
        return None
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def source_record(root: Path, seed: int, val_fraction: float) -> dict:
    """What the manifest says of the input: the folder, the package's version (None for a folder named by
    DEPTHATTN_LINUX_DOC_DIR), the files and how many are held out, their checksum, attribution and licence."""
    files = documentation_files(root)
    version = None if os.environ.get(DIR_VARIABLE) else package_version()
    held_out = sum(document_split(relative_name(path, root), seed, val_fraction) == "val" for path in files)
    origin = f"the Debian package {PACKAGE} {version}" if version else f"a copy of {PACKAGE}'s sources in {root}"
    return {"input": "linux-doc", "path": str(root), "package": PACKAGE, "version": version,
            "num_files": len(files), "num_held_out_files": held_out, "sha256": sources_checksum(root, files),
            "attribution": f"{ATTRIBUTION}, from {origin}", "license": LICENSE}
