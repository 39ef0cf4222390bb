"""The study's typed records (a cell, its result file) and the executor protocol."""

import dataclasses
import inspect
import json
import pickle
import re

import pytest

from depthattn.study import Cell, CellResult, Executor
from depthattn.study.local import LocalExecutor
from depthattn.study.slurm import SlurmExecutor, SlurmSettings


def test_a_cell_is_frozen_and_hashable_and_survives_pickling():
    cell = Cell({"layers": "4", "budget": "long"}, "vanilla", 0)
    same = Cell({"budget": "long", "layers": "4"}, "vanilla", 0)
    assert cell == same and hash(cell) == hash(same) and len({cell, same, Cell({}, "vanilla", 0)}) == 2
    assert cell.setting == {"layers": "4", "budget": "long"} and {**cell.setting, "layers": "8"}["layers"] == "8"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.seed = 1
    with pytest.raises(TypeError, match="cannot change"):
        cell.setting["layers"] = "8"
    assert pickle.loads(pickle.dumps(cell)) == cell  # worker processes and Slurm jobs get cells pickled
    assert cell.label == "layers=4,budget=long vanilla seed 0" and Cell({}, "moda", 2).label == "default moda seed 2"


def test_a_result_is_written_and_read_whole(tmp_path):
    path = tmp_path / "seed_0.json"
    CellResult("vanilla", 0, 2.5, {"val_bits_per_byte": 3.6, "curve": [[10, 2.6]]}).write(path)
    assert list(json.loads(path.read_text())) == ["method", "seed", "val_loss", "val_bits_per_byte", "curve"]
    result = CellResult.read(path)
    assert (result.method, result.seed, result.val_loss, result.source) == ("vanilla", 0, 2.5, path)
    assert result.get("curve") == [[10, 2.6]] and result.metric("val_bits_per_byte") == 3.6
    assert result.row({"layers": "4"})["setting"] == {"layers": "4"}
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} has no 'val_acc'"):
        result.metric("val_acc")


@pytest.mark.parametrize("text, message", [
    ('{"method": "vanilla", "seed": 0, "val_loss": 2.5', "is not valid JSON"),
    ('{"method": "vanilla", "seed": true, "val_loss": 2.5}', "seed missing or of the wrong type"),
    ('{"method": "vanilla", "seed": 0, "val_loss": NaN}', "val_loss is nan"),
])
def test_a_damaged_result_file_is_named_when_read(tmp_path, text, message):
    path = tmp_path / "cells" / "seed_0.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} .*{message}"):
        CellResult.read(path)


@pytest.mark.parametrize("executor", [LocalExecutor(), SlurmExecutor(SlurmSettings(), "runs")],
                         ids=["local", "slurm"])
def test_both_executors_implement_the_protocol(executor):
    assert isinstance(executor, Executor)
    for name in ("describe", "run"):
        expected = inspect.signature(getattr(Executor, name)).parameters
        assert list(inspect.signature(getattr(type(executor), name)).parameters) == list(expected), name
