"""The study's typed records (a cell, its result file), the executor protocol and the index page's config."""

import ast
import dataclasses
import inspect
import json
import pickle
import re
from pathlib import Path

import pytest

from depthattn.methods import METHODS
from depthattn.presets import METHOD_PRESETS
from depthattn.study import Cell, CellResult, Executor, IndexPage, Study, write_index
from depthattn.study.local import LocalExecutor
from depthattn.study.slurm import SlurmExecutor, SlurmSettings
from depthattn.study.store import CellStore

from .test_study import write_study

STUDY = Path(__file__).parents[2] / "src" / "depthattn" / "study"


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
    assert result.metric("curve") == [[10, 2.6]] and result.val_bits_per_byte == 3.6
    assert CellResult.read(path, {"layers": "4"}).cell == Cell({"layers": "4"}, "vanilla", 0)
    assert result.curve == {10: 2.6} and not hasattr(result, "get") and not hasattr(result, "__getitem__")
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


def test_no_study_module_names_a_method():
    """Which methods a study trains, measures against (its baseline) and sets side by side on the index page comes
    from the study configs and study/index.toml; the code names none."""
    names = set(METHODS) | set(METHOD_PRESETS)
    named = [(path.name, node.value) for path in STUDY.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in names]
    assert not named


def test_the_index_columns_come_from_its_config(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla", "depth_attention", "value_residual"),
                                   head='contrasts = [["value_residual", "depth_attention"]]'))
    for method, losses in {"vanilla": [2.0, 2.1], "depth_attention": [1.9, 2.05], "value_residual": [1.8, 1.8]}.items():
        for seed, loss in enumerate(losses):
            path = CellStore.of(study).result_path(study, Cell({}, method, seed))
            path.parent.mkdir(parents=True, exist_ok=True)
            CellResult(method, seed, loss, {"val_bits_per_byte": loss, "params_extra_over_vanilla": 0,
                                            "tokens_per_s": 1.0, "train_tokens": 10, "curve": [[10, loss]]}).write(path)
    config = tmp_path / "index.toml"
    config.write_text('[index]\ntitle = "Value residual"\nheading = "Two columns"\nfigure_title = "Both"\n'
                      'anchor = "value_residual"\n'
                      '[[index.columns]]\nlabel = "VR − base"\nmethod = "value_residual"\nagainst = "vanilla"\n'
                      '[[index.columns]]\nlabel = "VR − DA"\nmethod = "value_residual"\nagainst = "depth_attention"\n')
    page = write_index([study], CellStore.of(study), tmp_path / "study.md", IndexPage.load(config)).read_text()
    assert page.startswith("# Value residual\n") and "## Two columns\n" in page
    assert "| setting | study | train tokens | seeds | VR − base | VR − DA |\n|---|---|---|---|---|---|\n" in page
    row = next(line for line in page.splitlines() if line.startswith("| base | s | 10 | 2 | "))
    assert row.startswith("| base | s | 10 | 2 | -0.2500 [") and "| -0.1750 [" in row, row  # VR − DA: a contrast

    config.write_text(config.read_text().replace('against = "vanilla"', 'against = "vanila"'))
    with pytest.raises(ValueError, match=f"{re.escape(str(config))}: \\['vanila'\\] are not method presets"):
        IndexPage.load(config)
