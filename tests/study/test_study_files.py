"""A study's files: the data it declares and prepares, and the config file its report names."""

import json

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


def test_a_report_names_the_config_file_it_was_run_from(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"`depthattn study {tmp_path / 'mine.toml'}`" in markdown_report(study, CellStore.of(study), [])


def test_a_report_without_finished_cells_says_how_many_are_to_run(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"None of its {len(study.cells())} cells has finished yet" in markdown_report(study, CellStore.of(study), [])
