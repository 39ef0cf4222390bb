"""The checks that keep the downloaded sdist's entries inside its folder (sdist.unsafe_members)."""

import io
import tarfile

import pytest

from tests.native import sdist


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("info", [
    entry("transformers-5/tests/../../outside.py"),
    entry("/etc/passwd"),
    entry("transformers-5/tests/link", tarfile.SYMTYPE, "/etc/passwd"),
    entry("transformers-5/tests/hard", tarfile.LNKTYPE, "transformers-5/setup.py"),
    entry("transformers-5/tests/fifo", tarfile.FIFOTYPE),
])
def test_unsafe_entries_are_named(info):
    assert sdist.unsafe_members([entry("transformers-5/tests/test_a.py"), info]) == [info.name]


def test_plain_files_and_folders_extract(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(entry("transformers-5/tests", tarfile.DIRTYPE))
        data = b"x = 1\n"
        info = entry("transformers-5/tests/test_a.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        members = tar.getmembers()
        assert sdist.unsafe_members(members) == []
        tar.extractall(tmp_path, members)
    assert (tmp_path / "transformers-5/tests/test_a.py").read_text() == "x = 1\n"
