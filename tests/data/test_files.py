"""Atomic writes: the file appears whole or not at all, and nothing is left behind."""

import json

import pytest

from depthattn.files import AtomicFile, atomic_directory, atomic_write_json, check_output


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


def test_a_write_that_cannot_start_names_its_target_not_the_temporary(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a file")
    with pytest.raises(ValueError, match=f"{tmp_path / 'folder'} is a folder, not a file"):
        atomic_write_json(tmp_path / "folder", {})
    with pytest.raises(ValueError, match=f"{tmp_path / 'file.txt'} is a file, not a folder"):
        atomic_write_json(tmp_path / "file.txt" / "result.json", {})
    with pytest.raises(ValueError, match=f"{tmp_path / 'file.txt'} is a file, not a folder"), \
            atomic_directory(tmp_path / "file.txt"):
        pass
    with atomic_directory(tmp_path / "new" / "model") as building:  # missing parents are made
        (building / "weights").write_text("w")
    assert (tmp_path / "new" / "model" / "weights").read_text() == "w"

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".result.json.0123.tmp"))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.open", denied)
        with pytest.raises(PermissionError) as raised:
            atomic_write_json(tmp_path / "result.json", {})
    assert raised.value.filename == str(tmp_path / "result.json")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file.txt", "folder", "new"]


def test_an_output_is_checked_before_the_work_that_writes_it(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a file")
    check_output(tmp_path / "new" / "result.json")  # parents to be made are fine
    check_output(tmp_path / "folder", folder=True)
    with pytest.raises(ValueError, match="--out .*folder is a folder; name a file"):
        check_output(tmp_path / "folder")
    with pytest.raises(ValueError, match="OUT_DIR .*file.txt is a file; name a folder"):
        check_output(tmp_path / "file.txt", "OUT_DIR", folder=True)
    with pytest.raises(ValueError, match="cannot be made: .*file.txt is a file, not a folder"):
        check_output(tmp_path / "file.txt" / "deeper" / "result.json")
