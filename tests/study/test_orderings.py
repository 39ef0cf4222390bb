"""Sweeps of the same methods on two or more corpora compared by the order of their multipliers: planted orders are
recovered, pair by pair of sweeps."""

import pytest

from depthattn.study import CellResult
from depthattn.study.analyses.orderings import Orderings, compare
from depthattn.study.render.analyses import format_orderings
from depthattn.study.store import CellStore
from tests.study.test_multiplier import BUDGETS, fewer_resamples, loss  # noqa: F401 (a fixture)
from tests.study.test_study import WSD_BUDGETS, write_study

METHODS = ("vanilla", "depth_attention", "value_residual")


def write_orderings(tmp_path, data, seeds=range(5), names=("a", "b")):
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)
    for name in names:
        write_study(tmp_path, data, name=f"{name}.toml", axes=axes, methods=METHODS, seeds=seeds)
    path = tmp_path / "orderings.toml"
    path.write_text("[orderings]\nsweeps = [" + ", ".join(f'"{name}.toml"' for name in names) + "]\n")
    return path


def planted(study, multipliers, seeds=range(5), epochs_per_x=0.01):
    """Cells whose method m reaches vanilla's loss at multipliers[m] times its tokens; seed noise 0.003."""
    results = []
    for label, steps in study.branch_axis.values.items():
        x = steps * 10.0
        for seed in seeds:
            for method in (m for m in METHODS if m in study.methods):
                noise = 0.003 * (seed - 2) * (method != "vanilla")
                value = loss(multipliers.get(method, 1.0) * x) + 0.01 * seed + noise
                results.append(CellResult(method, seed, value, {
                    "train_tokens": steps * 1000, "params_total": 100, "data_epochs": epochs_per_x * x,
                    "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "curve": [], "val_bits_per_byte": value},
                    setting={"budget": label}))
    return results


def test_the_same_order_agrees_and_a_clear_swap_is_named_and_separated(tiny_data, tmp_path, monkeypatch):
    orderings = Orderings.load(write_orderings(tmp_path, tiny_data))
    same = {"depth_attention": 1.3, "value_residual": 1.1}
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted(self, same))
    found = compare(orderings)
    assert found.budgets and all(row.same and not row.swaps for row in found.budgets)
    swapped = {"depth_attention": 1.1, "value_residual": 1.3}
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted(self, same if self.name == "a" else swapped))
    found = compare(orderings)
    inside = [row for row in found.budgets if 20 <= row.x <= 200]
    assert inside and all(not row.same for row in inside)
    for row in inside:
        assert row.orders[0][0] == "depth_attention" and row.orders[1][0] == "value_residual"
        assert [s.pair for s in row.swaps] == [("depth_attention", "value_residual")]
        assert row.swaps[0].separated == (True, True) == row.swaps[0].separated_calibrated
    assert "depth_attention / value_residual (separated, separated; calibrated: separated, separated)" in \
        format_orderings(orderings, found)


def test_an_analysis_reads_its_sweeps_cells_in_the_results_folder_given(tiny_data, tmp_path, capsys):
    """`--analysis FILE --results R` reads the cells in R, not only writes its page there (it read each config's
    own results folder, relative to wherever it ran: a page of empty columns), and refuses the options it ignored."""
    from depthattn.cli import main

    path = write_orderings(tmp_path, tiny_data)
    assert {s.results for s in Orderings.load(path, results=str(tmp_path / "elsewhere")).sweeps} == \
        {str(tmp_path / "elsewhere")}
    assert {s.results for s in Orderings.load(path).sweeps} == {str(tmp_path / "results")}
    assert main(["study", "--analysis", str(path), "--seeds", "0", "--status"]) == 1
    assert "--seeds, --status does not apply; run it without" in capsys.readouterr().err


def test_orders_read_past_two_epochs_are_marked_and_a_method_one_sweep_lacks_is_named(tiny_data, tmp_path,
                                                                                      monkeypatch):
    path = write_orderings(tmp_path, tiny_data)
    b = (tmp_path / "b.toml").read_text()
    (tmp_path / "b.toml").write_text(b.replace('methods = ["vanilla", "depth_attention", "value_residual"]',
                                               'methods = ["vanilla", "depth_attention"]'))
    orderings = Orderings.load(path)
    multipliers = {"depth_attention": 1.3, "value_residual": 1.1}
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted(self, multipliers, epochs_per_x=0.004))
    found = compare(orderings)
    read = [1.3 * row.x * 0.004 for row in found.budgets]  # depth_attention's reading of vanilla's curve, in epochs
    assert any(r > 2 for r in read) and any(r <= 2 for r in read)
    for row, epochs in zip(found.budgets, read, strict=True):
        assert row.read_epochs == pytest.approx((epochs, epochs), rel=0.02)
        assert row.repeats(0) == row.repeats(1) == (epochs > 2)
    text = format_orderings(orderings, found)
    assert "depth_attention 1.30x‡" in text and "an order there is not a finding" in text
    assert found.left_out == {"value_residual": f"`{tmp_path / 'a.toml'}`"}
    assert f"left out: value_residual (only in `{tmp_path / 'a.toml'}`)" in text

    # a sweep whose rule flags from one epoch (text read about once) is flagged from there; the other as before
    b = (tmp_path / "b.toml").read_text()
    (tmp_path / "b.toml").write_text(b.replace("[study]\n", "[study]\nflag_epochs = 1\n"))
    orderings = Orderings.load(path)
    found = compare(orderings)
    assert any(1 < r <= 2 for r in read)
    for row, epochs in zip(found.budgets, read, strict=True):
        assert row.repeats(0) == (epochs > 2) and row.repeats(1) == (epochs > 1)
    assert "(past the fewer its rule flags from: `" in format_orderings(orderings, found)


def test_the_calibrated_separation_holds_the_held_out_documents_variance_where_cells_store_it(tiny_data, tmp_path,
                                                                                            monkeypatch):
    import numpy as np

    from tests.study.test_calibrated import with_documents

    orderings = Orderings.load(write_orderings(tmp_path, tiny_data))
    same, swapped = {"depth_attention": 1.3, "value_residual": 1.1}, {"depth_attention": 1.1, "value_residual": 1.3}
    spread = np.random.default_rng(0).standard_normal(40)
    scale = {"vanilla": 1.0, "depth_attention": 3.0, "value_residual": 0.0}  # documents that move one method only

    def read(_, study):
        if study.name == "a":
            return planted(study, same)
        return [with_documents(r, spread, scale) for r in planted(study, swapped)]

    monkeypatch.setattr(CellStore, "read_results", read)
    inside = [row for row in compare(orderings).budgets if 20 <= row.x <= 200]
    assert inside
    for row in inside:  # the seeds alone separate the swap in both; b's documents do not let it
        assert row.swaps[0].separated == (True, True) and row.swaps[0].separated_calibrated == (True, False)


def test_a_sweep_without_every_method_waits(tiny_data, tmp_path, monkeypatch):
    orderings = Orderings.load(write_orderings(tmp_path, tiny_data))
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [
        r for r in planted(self, {"depth_attention": 1.2}) if self.name == "a" or r.method != "value_residual"])
    found = compare(orderings)
    lacks = "seed 0 lacks value_residual at " + ", ".join(orderings.sweeps[1].branch_axis.values)
    assert found.missing == {orderings.sweeps[1].config_file: lacks}
    assert f"`{orderings.sweeps[1].config_file}`: {lacks}" in format_orderings(orderings, found)


def test_an_orderings_config_needs_two_sweeps(tiny_data, tmp_path):
    path = write_orderings(tmp_path, tiny_data)
    path.write_text('[orderings]\nsweeps = ["a.toml"]\n')
    with pytest.raises(ValueError, match="two or more study configs"):
        Orderings.load(path)


def test_three_corpora_are_compared_pair_by_pair_with_each_methods_rank(tiny_data, tmp_path, monkeypatch):
    orderings = Orderings.load(write_orderings(tmp_path, tiny_data, names=("a", "b", "c")))
    same, swapped = {"depth_attention": 1.3, "value_residual": 1.1}, {"depth_attention": 1.1, "value_residual": 1.3}
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted(self, swapped if self.name == "b" else same))
    found = compare(orderings)
    assert found.compared == tuple(s.config_file for s in orderings.sweeps) and not found.missing
    inside = [row for row in found.budgets if 20 <= row.x <= 200]
    assert inside and all(not row.same for row in inside)
    for row in inside:
        assert {p.sweeps: p.same for p in row.pairs} == {(0, 1): False, (0, 2): True, (1, 2): False}
        assert [(s.sweeps, s.pair) for s in row.swaps] == [((0, 1), ("depth_attention", "value_residual")),
                                                             ((1, 2), ("depth_attention", "value_residual"))]
        assert row.rank("depth_attention") == (1, 2, 1) and row.rank("value_residual") == (2, 1, 2)
    page = format_orderings(orderings, found)
    assert "no: a / b; b / c" in page and "b / c: depth_attention / value_residual (separated, separated;" in page
    assert "| method | a | b | c |" in page
    ranks = next(line for line in page.splitlines() if line.startswith("| depth_attention |"))
    assert ranks.split(" | ")[2].split(", ")[-1] == "2"  # its rank in b at the largest budget


def test_a_corpus_without_cells_waits_and_the_others_are_compared(tiny_data, tmp_path, monkeypatch):
    orderings = Orderings.load(write_orderings(tmp_path, tiny_data, names=("a", "b", "c")))
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [] if self.name == "c" else planted(
        self, {"depth_attention": 1.3, "value_residual": 1.1}))
    found = compare(orderings)
    a, b, c = (s.config_file for s in orderings.sweeps)
    assert found.missing == {c: "no cells yet"} and found.compared == (a, b)
    assert found.budgets and all(row.same and len(row.orders) == 2 for row in found.budgets)
    page = format_orderings(orderings, found)
    assert f"- `{c}`: no cells yet" in page and "the others are compared without them meanwhile" in page
    assert "| method | a | b |" in page  # ranked in the corpora that have cells
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [] if self.name != "a" else planted(self, {}))
    found = compare(orderings)  # one ready: nothing to compare, every other named
    assert set(found.missing) == {b, c} and not found.budgets and "| tokens per parameter |" not in format_orderings(
        orderings, found)
