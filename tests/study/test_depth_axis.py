"""The depth axis recovers what is planted: a multiplier that grows with depth, or holds."""

import pytest

from depthattn.study import Study
from depthattn.study.analyses.depth_axis import DepthAxis, depth_trend
from depthattn.study.render.analyses import format_depth_axis
from depthattn.study.store import CellStore
from depthattn.study.sweep import sweep_depth
from tests.study import test_tuning
from tests.study.test_multiplier import BUDGETS, fewer_resamples, planted_results  # noqa: F401 (a fixture)
from tests.study.test_study import BASE, WSD_BUDGETS, write_study

DEPTHS = (2, 4, 8)


def write_axis(tmp_path, data, depths=DEPTHS, seeds=range(5)):
    names = []
    for depth in depths:
        base = BASE.format(data=data).replace("num_hidden_layers = 2", f"num_hidden_layers = {depth}")
        axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS) + base
        names.append(write_study(tmp_path, data, name=f"sweep{depth}.toml", axes=axes, base=False, seeds=seeds).name)
    path = tmp_path / "axis.toml"
    path.write_text(f'[depth_axis]\ntitle = "Depth axis"\nsweeps = {names}\n'.replace("'", '"'))
    return path


def plant(monkeypatch, multiplier, seeds=range(5)):
    """Every sweep's cells with the data multiplier `multiplier(x, depth)`, each sweep's seed noise in an order of
    its own (the sweeps' runs are independent)."""
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(
        self, lambda x: multiplier(x, sweep_depth(self)), seeds=seeds, noise=0.005,
        turn=DEPTHS.index(sweep_depth(self))))


RUNGS = WSD_BUDGETS.replace("{ short = 3, long = 6 }", "{ one = 2, two = 4, three = 8 }")  # a target that can score


def test_a_multiplier_growing_with_depth_is_recovered_and_called_growing(tiny_data, tmp_path, monkeypatch):
    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    assert [sweep_depth(s) for s in axis.sweeps] == list(DEPTHS)
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** 0.2)
    trend = depth_trend(axis)
    entry = trend.methods["depth_attention"]
    inside = [row.delta for row in entry.budgets if 2 <= row.x <= 200]  # read within every sweep's curve
    assert inside
    for delta in inside:
        assert delta.value == pytest.approx(0.2, abs=0.03)
        assert delta.low <= delta.value <= delta.high and delta.verdict == "grows"
    surface = entry.surface
    assert surface.coefficients[2] == pytest.approx(0.2, abs=0.03)
    assert surface.coefficients[1] == pytest.approx(0.0, abs=0.03)  # constant in the budget
    assert surface.delta.verdict == "grows"
    multiplier, low, high = surface.at(20.0, 16)
    assert low <= multiplier <= high
    assert multiplier == pytest.approx(1.1 * 16 ** 0.2, rel=0.05)
    for delta in inside:  # the calibrated interval (grouped jackknife t) finds the same slope
        assert delta.t_low <= delta.value <= delta.t_high and delta.t_verdict == "grows"
    d = surface.delta
    assert d.t_low <= surface.coefficients[2] <= d.t_high and d.t_verdict == "grows"
    text = format_depth_axis(axis, trend)
    assert "## depth_attention" in text and "**grows** with depth" in text
    assert "; calibrated [" in text and "delta [calibrated 95%]" in text


def test_a_multiplier_constant_in_depth_holds(tiny_data, tmp_path, monkeypatch):
    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    plant(monkeypatch, lambda x, depth: 1.3)
    surface = depth_trend(axis).methods["depth_attention"].surface
    assert surface.coefficients[2] == pytest.approx(0.0, abs=0.03)
    assert surface.delta.verdict == "holds" and surface.delta.t_verdict == "holds"


def test_multipliers_read_past_the_baselines_budgets_or_two_epochs_are_marked(tiny_data, tmp_path, monkeypatch):
    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    plant(monkeypatch, lambda x, depth: 1.3)  # at the longest budget (500), vanilla's curve is read at 650: 6.5 epochs
    rows = {line.split(" | ")[0]: line.split(" | ")[1:1 + len(DEPTHS)]
            for line in format_depth_axis(axis, depth_trend(axis)).split("## depth_attention")[1].splitlines()
            if line.startswith("| ") and line[2].isalpha()}
    assert all(cell.startswith("1.3") and cell.endswith("]") for cell in rows["| b"])  # inside, within 2 epochs
    assert all(cell.endswith("]†‡") for cell in rows["| f"])


def test_three_seeds_give_slopes_but_no_intervals_or_verdicts(tiny_data, tmp_path, monkeypatch):
    from depthattn.study.analyses.predictions import predict_with_depth

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data, seeds=range(3)))
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** 0.2, seeds=range(3))
    entry = depth_trend(axis).methods["depth_attention"]
    assert all(row.delta.low is None and row.delta.verdict is None and row.delta.t_low is None
               for row in entry.budgets)
    assert entry.surface.delta.verdict is None and entry.surface.delta.t_verdict is None
    assert entry.surface.at(20.0, 16)[1] is None
    target = Study.load(write_study(tmp_path, tiny_data, name="rungs.toml", axes=RUNGS, seeds=range(5)))
    with pytest.raises(ValueError, match=r"waiting for: seeds: 3 at 2 layers, 3 at 4 layers, 3 at 8 layers\)"):
        predict_with_depth(axis, target, "2026-11-29", "nothing")


def test_sweeps_of_unequal_seed_counts_say_why_they_have_no_calibrated_interval(tiny_data, tmp_path, monkeypatch):
    axis = DepthAxis.load(write_axis(tmp_path, tiny_data, seeds=range(6)))
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(
        self, lambda x: 1.1 * sweep_depth(self) ** 0.2, seeds=range(6 if sweep_depth(self) == 8 else 5), noise=0.005,
        turn=DEPTHS.index(sweep_depth(self))))
    trend = depth_trend(axis)
    assert trend.seeds == [5, 5, 6] and trend.methods["depth_attention"].surface.delta.t_low is None
    assert "No calibrated interval: the sweeps' seed counts differ" in format_depth_axis(axis, trend)


def test_a_sweep_without_cells_is_named_and_nothing_is_fitted(tiny_data, tmp_path, monkeypatch):
    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [] if sweep_depth(self) == 8 else planted_results(
        self, lambda x: 1.2, noise=0.005))
    trend = depth_trend(axis)
    assert trend.methods == {} and list(trend.missing) == [axis.sweeps[2].config_file]
    assert trend.missing[axis.sweeps[2].config_file] == "no cells yet"
    assert "Waiting for cells" in format_depth_axis(axis, trend)


def test_a_sweep_waiting_for_its_first_seed_names_the_cells_it_lacks(tiny_data, tmp_path, monkeypatch):
    from depthattn.study.analyses.predictions import predict_with_depth

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [
        r for r in planted_results(self, lambda x: 1.2, seeds=[0])
        if sweep_depth(self) != 8 or r.method != "depth_attention" or r.setting["budget"] not in ("e", "f")])
    trend = depth_trend(axis)
    lacks = "seed 0 lacks depth_attention at e, f"
    assert trend.missing == {axis.sweeps[2].config_file: lacks}
    assert f"`{axis.sweeps[2].config_file}`: {lacks}" in format_depth_axis(axis, trend)
    target = Study.load(write_study(tmp_path, tiny_data, name="rungs.toml", axes=RUNGS, seeds=range(5)))
    with pytest.raises(ValueError, match=lacks):
        predict_with_depth(axis, target, "2026-11-29", "nothing")


@pytest.mark.parametrize("config, message", [
    ('sweeps = ["sweep2.toml"]', "two or more study configs"),
    ('sweeps = ["sweep2.toml", "sweep2.toml"]', "names each sweep once"),
    ('sweep = ["sweep2.toml", "sweep4.toml"]', r"unknown \[depth_axis\] keys \['sweep'\]; it takes title and sweeps"),
    ('title = 5\nsweeps = ["sweep2.toml", "sweep4.toml"]', "its title is a string"),
    ('sweeps = ["sweep2.toml", "sweep3.toml"]', r"axis.toml names sweep3.toml: .*does not exist"),
    ('sweeps = ["sweep2.toml", "lr.toml"]', "lr.toml is no budget sweep of one model"),
])
def test_a_bad_depth_axis_config_says_what_it_needs(tiny_data, tmp_path, config, message):
    path = write_axis(tmp_path, tiny_data)
    write_study(tmp_path, tiny_data, name="lr.toml", axes=test_tuning.RATES + WSD_BUDGETS)
    path.write_text(f"[depth_axis]\n{config}\n")
    with pytest.raises(ValueError, match=message):
        DepthAxis.load(path)


def test_sweeps_that_differ_in_more_than_depth_are_no_depth_axis(tiny_data, tmp_path):
    """Sweeps on two corpora (or two widths, two learning rates): their difference is not depth's."""
    path = write_axis(tmp_path, tiny_data)
    path.write_text('[depth_axis]\nsweeps = ["sweep2.toml", "sweep4.toml"]\n')
    DepthAxis.load(path)
    sweep4 = tmp_path / "sweep4.toml"
    sweep4.write_text(sweep4.read_text().replace("hidden_size = 32", "hidden_size = 48"))
    with pytest.raises(ValueError, match=r"sweep2.toml and .*sweep4.toml differ in more than depth "
                                         r"\(model.overrides.hidden_size\)"):
        DepthAxis.load(path)


def test_a_depth_informed_prediction_reads_the_surface_at_each_rungs_depth(tiny_data, tmp_path, monkeypatch):
    from depthattn.study.analyses.predictions import predict_with_depth, score
    from tests.study.test_predictions import TARGET_AXES, planted_target

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    target = Study.load(write_study(tmp_path, tiny_data, name="rungs.toml", axes=TARGET_AXES, seeds=range(5)))
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** 0.2)
    prediction = predict_with_depth(axis, target, "2026-11-29", "width does not matter")
    entry = prediction["methods"]["depth_attention"]
    assert entry["trend"]["delta"] == pytest.approx(0.2, abs=0.03)
    assert entry["trend"]["eta"] == pytest.approx(0.0, abs=0.03)  # the primary surface has the budget x depth term
    for at in entry["at"]:  # the rungs: 2 layers, inside the sweeps' depths, far below their budgets
        assert at["depth"] == 2 and at["extrapolated"]
        assert at["low"] <= at["multiplier"] <= at["high"]
        assert at["multiplier"] == pytest.approx(1.1 * 2 ** 0.2, rel=0.05)
        shapes = at["shapes"].values()  # the interval spans every shape's calibrated interval
        assert at["low"] == min(s["low"] for s in shapes if s["low"] is not None)
        assert at["high"] == max(s["high"] for s in shapes if s["high"] is not None)
    assert entry["paper"]["depth"] == 48 and entry["paper"]["extrapolated"]  # 6x past the deepest sweep
    planted = planted_target(target, 1.1 * 2 ** 0.2)  # the rungs' own cells, as planted at their depth
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted)
    assert {row.verdict for row in score(prediction, target, CellStore.of(target))} == {"agrees"}


def test_the_command_writes_the_depth_axis_report(tiny_data, tmp_path, monkeypatch, capsys):
    from depthattn.cli import main

    path = write_axis(tmp_path, tiny_data)
    plant(monkeypatch, lambda x, depth: 1.3)
    assert main(["study", "--analysis", str(path), "--results", str(tmp_path / "out")]) == 0
    assert "**holds** with depth" in (tmp_path / "out" / "axis.md").read_text()
    assert main(["study", str(path), "--analysis", str(path)]) != 0
    assert "give no study configs" in capsys.readouterr().err


def test_each_sweeps_seeds_are_resampled_independently_of_the_others():
    import numpy as np

    from depthattn.study.analyses.depth_axis import AtDepth, independent_resamples
    from depthattn.study.curve import BaselineCurve
    from depthattn.study.sweep import SeedBootstrap

    picks = np.random.default_rng(0).normal(size=(400, 3))  # what every sweep's generator draws alike
    x = np.array([1.0, 2.0, 5.0])
    sweeps = [AtDepth(depth, SeedBootstrap(["a", "b", "c"], x, list(range(5)), {}, None, BaselineCurve(x, x),
                                           {"m": np.ones(3)}, {"m": x}, {"m": picks.copy()}, None, {}))
              for depth in DEPTHS]
    out = [sweep.sample.boot["m"] for sweep in independent_resamples(sweeps)]
    assert np.array_equal(out[0], picks)  # the first keeps its order
    for draws in out[1:]:  # the others keep their own resamples, in an order of their own
        assert np.array_equal(np.sort(draws, axis=0), np.sort(picks, axis=0))
        assert abs(np.corrcoef(draws[:, 0], picks[:, 0])[0, 1]) < 0.2
    assert abs(np.corrcoef(out[1][:, 0], out[2][:, 0])[0, 1]) < 0.2


def test_a_gain_from_depth_that_shrinks_with_the_budget_is_an_interaction(tiny_data, tmp_path, monkeypatch):
    import math

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** (0.2 - 0.05 * math.log(x)))  # delta 0.2, eta -0.05
    trend = depth_trend(axis)
    found = trend.methods["depth_attention"].interaction
    a, gamma, delta, eta = found.coefficients
    assert eta == pytest.approx(-0.05, abs=0.015) and delta == pytest.approx(0.2, abs=0.04)
    assert found.eta.t_low <= eta <= found.eta.t_high and found.eta.t_verdict == "fades"
    assert found.delta_at[20.0].value == pytest.approx(0.2 - 0.05 * math.log(20), abs=0.03)
    text = format_depth_axis(axis, trend)
    assert "With a budget x depth term" in text and "the gain from depth **fades** with the budget" in text
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** 0.2)
    trend_of = depth_trend(axis).methods["depth_attention"].interaction
    assert trend_of.coefficients[3] == pytest.approx(0.0, abs=0.015) and trend_of.eta.t_verdict == "holds"


def test_a_depth_informed_prediction_reads_tokens_per_non_embedding_parameter(tiny_data, tmp_path, monkeypatch):
    """A multiplier planted in tokens per non-embedding parameter (embeddings are 25% to 57% of these sweeps'
    parameters) is recovered at a rung's count in that unit, which the file states beside the other count."""
    from depthattn.study.analyses.predictions import _non_embedding_scale, predict_with_depth
    from depthattn.study.pricing import cell_flops

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    scale = {sweep_depth(s): _non_embedding_scale(s) for s in axis.sweeps}
    assert all(1.3 < s < 2.5 for s in scale.values())
    plant(monkeypatch, lambda x, depth: 1.1 * (x * scale[depth]) ** 0.1 * depth ** 0.2)
    target = Study.load(write_study(tmp_path, tiny_data, name="rungs.toml", axes=RUNGS, seeds=range(5)))
    prediction = predict_with_depth(axis, target, "2026-12-05", "nothing")
    assert prediction["unit"] == "tokens per non-embedding parameter"
    entry = prediction["methods"]["depth_attention"]
    assert entry["trend"]["gamma"] == pytest.approx(0.1, abs=0.03)
    for at in entry["at"]:
        cost = cell_flops(target, {"budget": at["budget"]}, target.baseline)
        assert at["tokens_per_parameter"] == pytest.approx(cost["tokens"] / cost["params_non_embedding"])
        assert at["tokens_per_parameter_counting_embeddings"] == pytest.approx(cost["tokens"] / cost["params"])
        assert at["multiplier"] == pytest.approx(1.1 * at["tokens_per_parameter"] ** 0.1 * 2 ** 0.2, rel=0.05)


def test_where_every_sweeps_cells_store_their_documents_losses_the_depth_fits_hold_their_variance(
        tiny_data, tmp_path, monkeypatch):
    """The same held-out documents in every sweep, whose method gains on them more the deeper it is: leaving a group
    of documents out moves the slope in depth, and every calibrated interval of the axis widens by that."""
    import numpy as np

    from depthattn.study.analyses.depth_axis import prediction_surfaces
    from tests.study.test_calibrated import width, with_documents

    axis = DepthAxis.load(write_axis(tmp_path, tiny_data))
    planted = {}
    plant(monkeypatch, lambda x, depth: 1.1 * depth ** 0.2)
    for study in axis.sweeps:
        planted[study.name] = CellStore.of(study).read_results(study)
    bare = depth_trend(axis)
    spread = np.random.default_rng(2).standard_normal(40)
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: [
        with_documents(r, spread, {"depth_attention": 0.5 * sweep_depth(study)}) for r in planted[study.name]])
    both = depth_trend(axis)
    assert not bare.documents and both.documents
    a, b = bare.methods["depth_attention"], both.methods["depth_attention"]
    for row_a, row_b in zip(a.budgets, b.budgets, strict=True):
        assert row_a.delta.value == row_b.delta.value  # the same slope, a wider interval
        assert row_b.delta.t_high - row_b.delta.t_low > 1.05 * (row_a.delta.t_high - row_a.delta.t_low)
    for slope_a, slope_b in ((a.surface.delta, b.surface.delta), (a.interaction.eta, b.interaction.eta),
                             (a.interaction.delta_at[20.0], b.interaction.delta_at[20.0])):
        assert slope_b.t_high - slope_b.t_low > 1.05 * (slope_a.t_high - slope_a.t_low)
    assert "The held-out documents' variance is added" in format_depth_axis(axis, both)
    assert "the seeds' variance only" in format_depth_axis(axis, bare)
    shape = prediction_surfaces(axis, {}).methods["depth_attention"][0]  # what a prediction reads
    assert shape.documents_left_out is not None
    _, low, high = shape.at(20.0, 16)
    monkeypatch.setattr(CellStore, "read_results", lambda _, study: planted[study.name])
    _, bare_low, bare_high = prediction_surfaces(axis, {}).methods["depth_attention"][0].at(20.0, 16)
    assert width(low, high) > 1.05 * width(bare_low, bare_high)
