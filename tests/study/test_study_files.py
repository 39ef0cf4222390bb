"""A study's files: the data it declares and prepares, and the config file its report names."""

import json
import shutil

import pytest

from depthattn.study import Study, run_study
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
    study = Study.load(config)
    assert run_study(study, CellStore.of(study), seeds=[99]) is True and not data.exists()  # no cell: nothing prepared
    ensure_dataset(Study.load(config), str(data))
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["source"] == [str(source)] and manifest["splits"]["train"]["num_documents"] > 0
    ensure_dataset(Study.load(config), str(data))  # there as declared: nothing to do

    # declared otherwise than the folder was prepared: refused, not read as the declared data
    config.write_text(config.read_text().replace("vocab_size = 258", "vocab_size = 512"))
    with pytest.raises(ValueError, match=f"{data} was prepared with vocab_size 258, but the study's "
                                         r"\[datasets.\*\] declares vocab_size 512: .*or delete"):
        ensure_dataset(Study.load(config), str(data))
    tokenizer = manifest["tokenizer"]
    for older in ({**tokenizer, "origin": "trained"},  # read from its own field
                  {k: v for k, v in tokenizer.items() if k != "vocab_size_requested"}):  # an older manifest: its origin
        (data / "manifest.json").write_text(json.dumps({**manifest, "tokenizer": older}))
        with pytest.raises(ValueError, match=f"{data} was prepared with vocab_size 258"):
            ensure_dataset(Study.load(config), str(data))
    config.write_text(config.read_text().replace(f'input = "{source}"', 'input = "embedded"'))
    with pytest.raises(ValueError, match="prepared with input .*mine.jsonl', vocab_size 258, but .* declares input "
                                         "'embedded', vocab_size 512"):
        ensure_dataset(Study.load(config), str(data))



@pytest.mark.parametrize("declared", ["corpus", "./corpus", "./corpus/part0.txt"])
def test_a_declared_folder_or_path_is_found_in_its_manifest_as_prepare_wrote_it(tmp_path, monkeypatch, declared):
    """The manifest lists a folder's files and normalised paths: the study's next run takes the data as declared."""
    from depthattn.study.cell import ensure_dataset

    monkeypatch.chdir(tmp_path)
    for folder in ("corpus", "other"):
        (tmp_path / folder).mkdir()
        for i in range(2):
            (tmp_path / folder / f"part{i}.txt").write_text("\n\n".join(f"paragraph {i}.{j}: " + "some words. " * 30
                                                                         for j in range(40)))
    data = tmp_path / "prepared"
    config = write_study(tmp_path, data, head=f'[datasets.mine]\npath = "{data}"\nvocab_size = 258\n'
                                              f'input = "{declared}"')
    ensure_dataset(Study.load(config), str(data))
    ensure_dataset(Study.load(config), str(data))  # there as declared: nothing to do
    config.write_text(config.read_text().replace(f'input = "{declared}"', 'input = "other"'))
    with pytest.raises(ValueError, match="prepared with input 'corpus/part0.txt.*declares input 'other'"):
        ensure_dataset(Study.load(config), str(data))


def test_a_declared_sha256_refuses_another_text_of_the_same_input(tmp_path, monkeypatch):
    """A package's next build changes the text under the same input name and path: the declared sha256 keeps
    its cells from mixing with the declared text's."""
    from depthattn.data import linux_doc
    from depthattn.study.cell import ensure_dataset
    from tests.data.test_data_linux_doc import write_docs

    root = write_docs(tmp_path / "_sources")
    monkeypatch.setenv(linux_doc.DIR_VARIABLE, str(root))
    declared = linux_doc.sources_checksum(root, linux_doc.documentation_files(root))
    data = tmp_path / "prepared"
    config = write_study(tmp_path, data, head=f'[datasets.docs]\npath = "{data}"\nvocab_size = 258\n'
                                              f'input = "linux-doc"\nsha256 = "{declared}"')
    ensure_dataset(Study.load(config), str(data))
    assert json.loads((data / "manifest.json").read_text())["source_files"][0]["sha256"] == declared
    ensure_dataset(Study.load(config), str(data))  # there as declared: nothing to do

    # a folder prepared from another text than the one declared: refused
    other = config.parent / "other.toml"
    other.write_text(config.read_text().replace(declared, "0" * 64))
    with pytest.raises(ValueError, match=f"{data} was prepared from a text with sha256 {declared} .*declares 0+: "):
        ensure_dataset(Study.load(other), str(data))

    # the package's text changed, to be prepared afresh: refused before preparing, the folder's other files kept
    (root / "core-api" / "page0.rst.txt").write_text("Page 0, as the next build ships it.\n")
    shutil.rmtree(data)
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"the input 'linux-doc' read here .*has sha256 (?!{declared})[0-9a-f]{{64}}, "
                                         rf"but the study's \[datasets.\*\] declares {declared}: its cells would mix"):
        ensure_dataset(Study.load(config), str(data))
    assert [p.name for p in data.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("declaration, message", [
    ('input = "embedded"\nsha256 = "' + "0" * 64 + '"', "only the inputs whose text prepare checksums have "
                                                         r"\(wikipedia, linux-doc\), not 'embedded': remove it"),
    ('input = "linux-doc"\nsha256 = "96C0"', "sha256 must be 64 lowercase hex digits .*got '96C0'"),
])
def test_a_sha256_is_declared_for_a_checked_input_in_full(tmp_path, declaration, message):
    config = write_study(tmp_path, tmp_path / "data", head=f'[datasets.docs]\npath = "{tmp_path / "data"}"\n'
                                                           f'{declaration}')
    with pytest.raises(ValueError, match=message):
        Study.load(config)


def test_a_report_names_the_config_file_it_was_run_from(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"`depthattn study {tmp_path / 'mine.toml'}`" in markdown_report(study, CellStore.of(study), [])


def test_a_report_without_finished_cells_says_how_many_are_to_run(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, name="mine.toml"))
    assert f"None of its {len(study.cells())} cells has finished yet" in markdown_report(study, CellStore.of(study), [])


def test_a_report_before_every_fixed_seed_has_its_cells_says_it_is_interim(tiny_data, tmp_path):
    from depthattn.study.records import CellResult

    study = Study.load(write_study(tmp_path, tiny_data, seeds=(0, 1, 2)))
    record = {"val_bits_per_byte": 1.0, "train_tokens": 4096, "params_total": 1000, "params_extra_over_vanilla": 0,
              "tokens_per_s": 1.0, "curve": []}
    results = [CellResult(cell.method, cell.seed, 3.0 - 0.01 * cell.seed, record, setting=cell.setting)
               for cell in study.cells() if (cell.seed, cell.method) != (2, "depth_attention")]
    interim = "**Interim**: 2 of the 3 seeds the study fixed have every cell"
    assert interim in markdown_report(study, CellStore.of(study), results)
    last = CellResult("depth_attention", 2, 2.9, record, setting=study.cells([2])[-1].setting)
    assert "Interim" not in markdown_report(study, CellStore.of(study), [*results, last])
