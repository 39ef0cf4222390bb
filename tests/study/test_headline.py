"""The results table across sweeps (depthattn.study.analyses.headline): each column's planted multipliers are read
with their sweep's intervals and called ahead, behind or not shown; a tuned column reads a learning-rate sweep's
tuned reading; a sweep without cells says what it lacks; a bad config names what it needs."""

import dataclasses

import pytest

from depthattn.study.analyses.headline import Headline, headline_table
from depthattn.study.calibrated import holm
from depthattn.study.records import Cell
from depthattn.study.render.analyses import format_headline
from depthattn.study.store import CellStore
from tests.study import test_tuning
from tests.study.test_multiplier import BUDGETS, fewer_resamples  # noqa: F401 (a fixture)
from tests.study.test_orderings import METHODS, planted
from tests.study.test_study import WSD_BUDGETS, write_study

AXES = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)


def write_headline(tmp_path, data, columns, lr_sweep=False, seeds=None):
    """The sweeps a.toml and b.toml (and lr.toml, a learning-rate sweep) and a headline config of `columns`
    (label, study file, budget); each sweep's rule fixes seeds 0-4 unless `seeds` (name -> seeds) says others."""
    for name in ("a", "b"):
        write_study(tmp_path, data, name=f"{name}.toml", axes=AXES, methods=METHODS,
                    seeds=(seeds or {}).get(name, range(5)))
    if lr_sweep:
        write_study(tmp_path, data, name="lr.toml", axes=test_tuning.RATES + AXES, seeds=range(5))
    path = tmp_path / "headline.toml"
    path.write_text('[headline]\ntitle = "planted"\n' + "".join(
        f'[[headline.columns]]\nlabel = "{label}"\nstudy = "{study}"\nbudget = "{budget}"\n'
        for label, study, budget in columns))
    return path


def test_planted_multipliers_are_read_and_called_per_column(tiny_data, tmp_path, monkeypatch):
    headline = Headline.load(write_headline(tmp_path, tiny_data, [("first", "a.toml", "d"), ("second", "b.toml", "d")]))
    gains = {"a": {"depth_attention": 1.3, "value_residual": 1.0}, "b": {"depth_attention": 1.3, "value_residual": 0.7}}
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: planted(study, gains[study.name]))
    found = headline_table(headline)
    assert found.methods == ["depth_attention", "value_residual"]
    first, second = found.columns
    assert first.seeds == second.seeds == 5 and first.x == 100 and not first.missing
    assert first.cells["depth_attention"].point.multiplier == pytest.approx(1.3, rel=0.02)
    assert [first.cells[m].verdict for m in found.methods] == ["ahead", "not shown"]
    assert [second.cells[m].verdict for m in found.methods] == ["ahead", "behind"]
    page = format_headline(headline, found)
    assert "| headline | first, d tok/param | second, d tok/param |" in page
    assert "`: intervals over the seeds only (not every cell stores each held-out document's loss: older cells " in page
    # depth_attention reads vanilla's curve at 1.3 x 100 tokens per parameter, 0.01 epochs each
    assert first.read_epochs == pytest.approx(1.3, rel=0.02) and "vanilla's curve read at up to 1.30 epochs" in page
    assert "| depth_attention | 1.30x [" in page and "] ✓ |" in page and "] ✗ |" in page and "] · |" in page
    # a study whose rule flags from one epoch marks that reading ‡, and the legend names both limits
    first_column = dataclasses.replace(headline.columns[0],
                                       study=dataclasses.replace(headline.columns[0].study, flag_epochs=1.0))
    flagged = format_headline(dataclasses.replace(headline, columns=[first_column, *headline.columns[1:]]), found)
    assert "| depth_attention | 1.30x [" in flagged and "]‡ ✓ | " in flagged and "]‡ ✓ | " not in page
    assert "‡ read past the column's study's flag (1 or 2 epochs)" in flagged
    assert "— none: the column's study has no such method, or its cells are not in yet" in page
    # Holm over the whole table's four tests: stricter than each column's two, and here every mark stands
    raw = {(c.label, m): cell.p for c in found.columns for m, cell in c.cells.items()}
    table, per_column = holm({str(key): p for key, p in raw.items()}), {}
    for c in found.columns:
        per_column.update({str((c.label, m)): p for m, p in holm({m: cell.p for m, cell in c.cells.items()}).items()})
    assert all(0 < p < 1 for p in raw.values()) and all(table[k] >= per_column[k] for k in table)
    assert found.table_verdicts == {(c.label, m): cell.verdict for c in found.columns for m, cell in c.cells.items()}
    assert "With Holm's adjustment over all 4 tests of the table's complete columns" in page
    assert "every mark stands." in page
    stricter = dataclasses.replace(found, table_verdicts={**found.table_verdicts, ("first", "depth_attention"):
                                                          "not shown"})
    assert "depth_attention in first: ✓ → ·; every other mark stands." in format_headline(headline, stricter)
    store = CellStore.of(headline.sweeps[1])  # a diverged run is named beside its column
    cell = Cell({"budget": "f"}, "value_residual", 4)
    store.write_diverged(headline.sweeps[1].cell_path(cell), cell, "the gradient norm became nan at step 40", {})
    found = headline_table(headline)
    assert [c.diverged for c in found.columns] == [1, 1]  # a.toml and b.toml train the same cells: they share it
    page = format_headline(headline, found)
    assert " (1 cells diverged: no loss; the study's page lists them): intervals over the seeds only" in page
    # with seeds 0-4 of the six the first sweep's rule fixes, its column is a look before the end: no marks
    interim = Headline.load(write_headline(tmp_path, tiny_data, [("first", "a.toml", "d"), ("second", "b.toml", "d")],
                                           seeds={"a": range(6)}))
    page = format_headline(interim, headline_table(interim))
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in page.splitlines() if line.startswith("| ")}
    assert rows["| depth_attention"][0].startswith("1.30x [") and rows["| depth_attention"][0].endswith("]")
    assert rows["| value_residual"][1].endswith("] ✗ |") and rows["| seeds"] == ["5 of 6", "5 |"]
    assert set(headline_table(interim).table_verdicts) == {("second", m) for m in found.methods}  # complete only
    # with four of the five seeds in, no interval is printed, and the note says why
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: planted(study, gains[study.name], seeds=range(4)))
    page = format_headline(headline, headline_table(headline))
    assert ": no intervals yet (4 seeds, fewer than the 5 an interval needs)" in page and "seeds only" not in page


def test_a_learning_rate_sweeps_column_is_its_tuned_reading(tiny_data, tmp_path, monkeypatch):
    headline = Headline.load(write_headline(tmp_path, tiny_data, [("tuned", "lr.toml", "b")], lr_sweep=True))
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: test_tuning.planted(study, efficiency))
    (column,) = headline_table(headline).columns
    cell = column.cells["depth_attention"]
    assert column.tuned and cell.point.rate == "4e-3" and cell.verdict == "ahead"
    assert cell.point.multiplier == pytest.approx(1.3, rel=0.05)
    assert column.read_epochs == pytest.approx(cell.point.multiplier * 20 * 0.001)  # 20 tokens per parameter at b
    assert f"| depth_attention | {cell.point.multiplier:.2f}x [" in format_headline(headline, headline_table(headline))
    assert "@4e-3ᵉ ✓ |" in format_headline(headline, headline_table(headline))


def test_a_column_that_tunes_the_baseline_alone_reads_each_method_at_its_one_rate(tiny_data, tmp_path,
                                                                                  monkeypatch):
    path = write_headline(tmp_path, tiny_data, [("tuned", "lr.toml", "b")], lr_sweep=True)
    lr = tmp_path / "lr.toml"
    lr.write_text(lr.read_text().replace('"4e-3" = 4e-3 }\n', '"4e-3" = 4e-3 }\nbaseline_only = ["1e-3", "4e-3"]\n'))
    headline = Headline.load(path)
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 1.25},
                  "depth_attention": {"1e-3": 1.0, "2e-3": 1.5, "4e-3": 1.0}}  # cells left out below
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: [
        r for r in test_tuning.planted(study, efficiency) if study.trains(r.setting, r.method)])
    (column,) = headline_table(headline).columns
    cell = column.cells["depth_attention"]
    assert column.tuned and column.baseline_alone and cell.point.rate == "2e-3"
    assert cell.point.multiplier == pytest.approx(1.5 / 1.25, rel=0.05) and cell.verdict == "ahead"
    page = format_headline(headline, headline_table(headline))
    assert "`, tuned (vanilla alone: its best rate is picked on the data that scores it" in page


def test_a_sweep_without_cells_says_what_it_lacks(tiny_data, tmp_path, monkeypatch):
    headline = Headline.load(write_headline(tmp_path, tiny_data, [("first", "a.toml", "d"), ("second", "b.toml", "d")]))
    monkeypatch.setattr(CellStore, "read_results",
                        lambda _, study: planted(study, {"depth_attention": 1.3}) if study.name == "a" else [])
    found = headline_table(headline)
    assert found.columns[1].missing and not found.columns[1].cells and found.columns[0].cells
    page = format_headline(headline, found)
    assert f"`{headline.sweeps[1].config_file}`: {found.columns[1].missing}" in page
    assert "| seeds | 5 | — |" in page

    # a column's seeds so far of those its rule may run, more_seeds included
    a = tmp_path / "a.toml"
    a.write_text(a.read_text().replace("seeds = [0, 1, 2, 3, 4]", "seeds = [0, 1, 2, 3, 4]\nmore_seeds = [5]"))
    headline = Headline.load(tmp_path / "headline.toml")
    assert "| seeds | 5 of 6 | — |" in format_headline(headline, headline_table(headline))


@pytest.mark.parametrize("columns, message", [
    ([("first", "a.toml", "z")], "has no branched budget 'z'; its budgets: a, b, c, d, e, f"),
    ([], r"\[\[headline.columns\]\]"),
])
def test_a_bad_headline_config_says_what_it_needs(tiny_data, tmp_path, columns, message):
    with pytest.raises(ValueError, match=message):
        Headline.load(write_headline(tmp_path, tiny_data, columns))


def test_a_headline_column_reads_one_model_and_a_tuned_one_has_the_reference_rate(tiny_data, tmp_path):
    path = write_headline(tmp_path, tiny_data, [("tuned", "lr.toml", "b")], lr_sweep=True)
    Headline.load(path)
    lr = tmp_path / "lr.toml"
    lr.write_text(lr.read_text().replace('"2e-3" = 2e-3, ', ""))
    with pytest.raises(ValueError, match="lr.toml's rates lack 2e-3, the untuned sweeps' rate"):
        Headline.load(path)
    lr.write_text(lr.read_text().replace('key = "optim.lr"', 'key = "optim.weight_decay"')
                  .replace('{ "1e-3" = 1e-3, "4e-3" = 4e-3 }', "[0.1, 0.2]"))
    with pytest.raises(ValueError, match="lr.toml has axes besides its budget .*a column reads one model"):
        Headline.load(path)


def test_a_headline_budget_is_a_quoted_label_that_every_method_trains(tiny_data, tmp_path):
    path = write_headline(tmp_path, tiny_data, [("first", "a.toml", "1")])
    a = tmp_path / "a.toml"
    a.write_text(a.read_text().replace(BUDGETS, '{ "1" = 1, "2" = 2, "5" = 5, "10" = 10 }')
                 .replace("branches = true", 'branches = true\nbaseline_only = ["10"]'))
    Headline.load(path)
    path.write_text(path.read_text().replace('budget = "1"', "budget = 1"))
    with pytest.raises(ValueError, match=r"has no branched budget 1; .* \(a label is a string: budget = \"1\"\)"):
        Headline.load(path)
    path.write_text(path.read_text().replace("budget = 1", 'budget = "10"'))
    with pytest.raises(ValueError, match="only the baseline trains budget '10' of .*choose a budget every method"):
        Headline.load(path)
