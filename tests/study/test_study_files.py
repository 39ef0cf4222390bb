"""A study's files: the data it declares and prepares, and the config file its report names."""

import json

import pytest

from depthattn.study import Study
from depthattn.study.report import markdown_report
from depthattn.study.store import CellStore
from tests.study.test_study import write_study


def test_a_study_prepares_its_declared_dataset_from_the_input_it_names(tmp_path):
    from depthattn.study.cell import ensure_dataset
    from tests.data.data_helpers import write_jsonl

    source = write_jsonl(tmp_path / "mine.jsonl", [f"document {i}: " + "some text. " * 40 for i in range(40)])
    data = tmp_path / "prepared"
    config = write_study(tmp_path, data, head=f'[datasets.mine]\npath = "{data}"\nvocab_size = 258\n'
                                              f'input = "{source}"')
    ensure_dataset(Study.load(config), str(data))
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["source"] == [str(source)] and manifest["splits"]["train"]["num_documents"] > 0
    ensure_dataset(Study.load(config), str(data))  # there as declared: nothing to do

    # declared otherwise than the folder was prepared: refused, not read as the declared data
    config.write_text(config.read_text().replace("vocab_size = 258", "vocab_size = 512"))
    with pytest.raises(ValueError, match=f"{data} was prepared with vocab_size 258, but the study's "
                                         r"\[datasets.\*\] declares vocab_size 512: .*or delete"):
        ensure_dataset(Study.load(config), str(data))
    config.write_text(config.read_text().replace(f'input = "{source}"', 'input = "embedded"'))
    with pytest.raises(ValueError, match="prepared with input .*mine.jsonl', vocab_size 258, but .* declares input "
                                         "'embedded', vocab_size 512"):
        ensure_dataset(Study.load(config), str(data))


def test_a_report_names_the_config_file_it_was_run_from(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"`depthattn study {tmp_path / 'mine.toml'}`" in markdown_report(study, CellStore.of(study), [])


def test_a_report_without_finished_cells_says_how_many_are_to_run(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"None of its {len(study.cells())} cells has finished yet" in markdown_report(study, CellStore.of(study), [])
