"""Two sweeps of the same methods compared by the order of their multipliers: planted orders are recovered."""

import pytest

from depthattn.study import CellResult
from depthattn.study.analyses.orderings import Orderings, compare
from depthattn.study.render.analyses import format_orderings
from depthattn.study.store import CellStore
from tests.study.test_multiplier import BUDGETS, fewer_resamples, loss  # noqa: F401 (a fixture)
from tests.study.test_study import WSD_BUDGETS, write_study

METHODS = ("vanilla", "depth_attention", "value_residual")


def write_orderings(tmp_path, data, seeds=range(5)):
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)
    for name in ("a.toml", "b.toml"):
        write_study(tmp_path, data, name=name, axes=axes, methods=METHODS, seeds=seeds)
    path = tmp_path / "orderings.toml"
    path.write_text('[orderings]\nsweeps = ["a.toml", "b.toml"]\n')
    return path


def planted(study, multipliers, seeds=range(5)):
    """Cells whose method m reaches vanilla's loss at multipliers[m] times its tokens; seed noise 0.003."""
    results = []
    for label, steps in study.branch_axis.values.items():
        x = steps * 10.0
        for seed in seeds:
            for method in METHODS:
                noise = 0.003 * (seed - 2) * (method != "vanilla")
                value = loss(multipliers.get(method, 1.0) * x) + 0.01 * seed + noise
                results.append(CellResult(method, seed, value, {
                    "train_tokens": steps * 1000, "params_total": 100, "data_epochs": 0.01 * x,
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
    with pytest.raises(ValueError, match="two study configs"):
        Orderings.load(path)
