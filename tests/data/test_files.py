"""Atomic writes: the file appears whole or not at all, and nothing is left behind."""

import json

import pytest

from depthattn.files import AtomicFile, atomic_write_json


def test_atomic_write_makes_parents_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "new" / "dir" / "result.json"
    atomic_write_json(path, {"loss": 1.5})
    assert json.loads(path.read_text()) == {"loss": 1.5}
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "result.json"
    atomic_write_json(path, {"loss": 1.5})
    with pytest.raises(RuntimeError, match="crash"), AtomicFile(path) as file:
        file.write(b'{"loss": ')
        raise RuntimeError("crash")
    assert json.loads(path.read_text()) == {"loss": 1.5}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
