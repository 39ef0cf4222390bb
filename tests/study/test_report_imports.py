"""Writing a study's report reads its result files and draws figures: it needs no trainer."""

import json
import subprocess
import sys

import pytest

from depthattn.study import Cell, CellResult, Study
from depthattn.study.store import CellStore
from tests.test_layout import graph

from .test_study import write_study

# what trains cells: the report's own imports reach none of it
RUNNING = ("depthattn.study.cell", "depthattn.study.local", "depthattn.study.runner", "depthattn.study.slurm",
           "depthattn.study.mixing_maps", "depthattn.train.")


def trainer(modules) -> set[str]:
    """The modules of `modules` that train cells; the training config is only read."""
    return {m for m in modules if m.startswith(RUNNING) and m != "depthattn.train.config"}
def test_the_reports_own_imports_reach_no_trainer():
    edges = graph()
    seen, todo = set(), ["depthattn.study.report"]
    while todo:
        module = todo.pop()
        seen.add(module)
        todo += [t for t in edges[module] if t not in seen]
    assert not trainer(seen), sorted(seen)


@pytest.fixture(scope="module")
def imported(tiny_data, tmp_path_factory):
    """The report a fresh process writes of two finished cells, and the depthattn modules it has imported then."""
    tmp_path = tmp_path_factory.mktemp("report")
    study = Study.load(write_study(tmp_path, tiny_data, seeds=(0,)))
    for method, loss in (("vanilla", 2.0), ("depth_attention", 1.9)):
        CellStore.of(study).write(study.cell_path(Cell({}, method, 0)), CellResult(method, 0, loss, {
            "val_bits_per_byte": loss, "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "train_tokens": 10,
            "curve": [[10, loss]]}))
    code = ("import json, sys\nfrom depthattn.study import CellStore, Study, write_report\n"
            f"study = Study.load({study.config_file!r})\nwrite_report(study, CellStore.of(study))\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('depthattn'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    return (tmp_path / "results" / "s.md").read_text(), set(json.loads(out.stdout.splitlines()[-1]))


def test_a_fresh_process_writes_the_report(imported):
    report, modules = imported
    assert "| depth_attention | 1 | 1.9000 | " in report and "depthattn.study.report" in modules  # one seed: no sd


def test_writing_a_report_imports_no_trainer(imported):
    _, modules = imported
    assert "depthattn.train.config" in modules and not trainer(modules), sorted(modules)


# what computes statistics: a page's Markdown reads records and calls none of it
STATISTICS = ("statistics", "numpy", "scipy", "depthattn.study.stats.summarize", "depthattn.study.stats.paired_",
              "depthattn.study.stats.compare_studies", "depthattn.study.stats.last_quarter",
              "depthattn.study.stats.curve_summary", "depthattn.study.trend.trend", "depthattn.study.trend.gain_table",
              "depthattn.study.picks.confirmation", "depthattn.study.picks.search_result",
              "depthattn.study.sweep.Sweep")


def test_the_study_page_writes_records_and_computes_nothing():
    from tests.test_layout import MODULES, imports

    path = MODULES["depthattn.study.render.study_page"]
    found = imports(path, top_level=True) + imports(path, top_level=False)
    assert "depthattn.study.stats.Difference" in found  # the check sees the module's imports
    assert not [name for name in found if name.startswith(STATISTICS)], found
