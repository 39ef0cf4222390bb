"""Multipliers recover what is planted: a method worth k times the baseline's data, constant or growing."""

import dataclasses
import math

import numpy as np
import pytest

from depthattn.study import CellResult, Study
from depthattn.study.curve import BaselineCurve
from depthattn.study.fits import Slope
from depthattn.study.multiplier import BudgetTrend, MethodMultipliers, MultiplierPoint, multipliers
from depthattn.study.render.numbers import format_multiplier
from depthattn.study.report import markdown_report
from depthattn.study.store import CellStore
from tests.study.test_study import WSD_BUDGETS, write_study

E, B, BETA = 1.0, 2.0, 0.4
BUDGETS = '{ a = 1, b = 2, c = 5, d = 10, e = 20, f = 50 }'  # steps; x 1,000 tokens / 100 parameters


def loss(x):
    return E + B * x ** -BETA


def planted_results(study, multiplier_of, seeds=range(5), noise=0.0, epochs_per_x=0.01, curve=loss, turn=0):
    """Cells whose vanilla loss is curve(x) (by default L(x)) and whose depth_attention loss is curve(k(x) x): a
    data multiplier k(x). Seed s shifts both by the same offset (pairing) and the method by noise * (s' - 2), s' the
    seed's position after `turn` turns of the seeds (so that sweeps planted with other turns differ seed by seed)."""
    results = []
    for label, steps in study.branch_axis.values.items():
        x = steps * 10.0  # tokens per parameter
        for seed in seeds:
            shift = 0.01 * seed
            for method, value in (("vanilla", curve(x)),
                                  ("depth_attention", curve(multiplier_of(x) * x)
                                   + noise * ((seed + turn) % len(seeds) - 2))):
                results.append(CellResult(method, seed, value + shift, {
                    "train_tokens": steps * 1000, "params_total": 100, "data_epochs": epochs_per_x * x,
                    "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "curve": [], "val_bits_per_byte": value},
                    setting={"budget": label}))
    return results


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):  # also used by test_predictions and test_depth_axis
    """Fewer seed resamples than the rule's 2,000 (and 400 joint fits): enough for the planted values' intervals."""
    from depthattn.study import multiplier, sweep

    monkeypatch.setattr(sweep, "RESAMPLES", 400)
    monkeypatch.setattr(multiplier, "FIT_RESAMPLES", 50)


@pytest.fixture
def study(tiny_data, tmp_path):
    return Study.load(write_study(tmp_path, tiny_data, axes=WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)))


def test_a_constant_multiplier_is_recovered_at_every_budget_and_holds(study):
    found = multipliers(study, planted_results(study, lambda x: 1.3, noise=0.005))
    row = found.rows[0]
    inside = [p for p in row.points if not p.extrapolated]
    assert len(inside) >= 4
    for p in inside:  # the monotone cubic in log x follows the power law between budgets
        assert p.multiplier == pytest.approx(1.3, rel=0.02)
        assert p.low <= p.multiplier <= p.high
    assert row.trend.gamma.verdict == "holds"
    assert found.fit.methods["depth_attention"].k == pytest.approx(1.3, rel=0.02)
    assert found.fit.beta == pytest.approx(BETA, rel=0.05)


def test_a_growing_multiplier_is_called_growing_and_a_fading_one_fading(study):
    grows = multipliers(study, planted_results(study, lambda x: 1.1 * x ** 0.1, noise=0.005))
    assert grows.rows[0].trend.gamma.verdict == "grows"
    assert grows.rows[0].trend.gamma.value == pytest.approx(0.1, abs=0.02)
    assert grows.fit.methods["depth_attention"].gamma.value == pytest.approx(0.1, abs=0.02)
    fades = multipliers(study, planted_results(study, lambda x: 2.0 * x ** -0.1, noise=0.005))
    assert fades.rows[0].trend.gamma.verdict == "fades"


def test_reading_past_the_curve_is_marked_and_far_past_it_is_a_bound(study):
    found = multipliers(study, planted_results(study, lambda x: 1.5, epochs_per_x=0.005))
    last = found.rows[0].points[-1]  # at 500 tokens per parameter: vanilla's curve ends there
    assert last.extrapolated and last.printable and format_multiplier(last).endswith("†‡")
    assert last.multiplier == pytest.approx(1.5, rel=0.05)  # the anchored power law is the planted one
    assert last.read_epochs > 2 and "‡" in format_multiplier(last)
    far = multipliers(study, planted_results(study, lambda x: 4.0)).rows[0].points[-1]
    assert not far.printable and format_multiplier(far) == "> 2.00x†"


def test_a_study_whose_rule_flags_from_one_epoch_marks_those_readings_and_fits_as_before(tiny_data, tmp_path):
    """[study] flag_epochs = 1 (a sweep on text read about once): ‡ from 1 epoch in every multiplier table; gamma
    still fits the budgets trained within 2 epochs, so its value is the default study's."""
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)
    default = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    strict = Study.load(write_study(tmp_path, tiny_data, axes=axes, head="flag_epochs = 1", name="strict.toml"))
    cells = planted_results(default, lambda x: 1.3, noise=0.005, epochs_per_x=0.003)  # 1.3 x 500 x 0.003: 1.95
    assert strict.flag_epochs == 1 and default.flag_epochs == 2
    pages = {study.name: markdown_report(study, CellStore.of(study), cells) for study in (default, strict)}
    table = {name: next(line for line in page.splitlines() if line.startswith("| depth_attention | 1.")).split(" | ")
             for name, page in pages.items()}
    # the columns 200 and 500 read vanilla's curve at 0.78 and 1.95 epochs
    assert not table["s"][5].endswith("‡") and not table["s"][6].endswith("‡")
    assert not table["strict"][5].endswith("‡") and table["strict"][6].endswith("‡")
    assert table["s"][7] == table["strict"][7]  # gamma
    assert "past 1 epochs" in pages["strict"] and "the study's rule flags from 1" in pages["strict"]
    for bad in ("3", "0", '"one"', "true"):
        with pytest.raises(ValueError, match="flag_epochs must be a number of epochs above 0 and at most 2"):
            Study.load(write_study(tmp_path, tiny_data, axes=axes, head=f"flag_epochs = {bad}", name="bad.toml"))


def test_three_seeds_give_points_but_no_intervals_or_verdicts(study):
    found = multipliers(study, planted_results(study, lambda x: 1.3, seeds=range(3)))
    row = found.rows[0]
    assert all(p.low is None for p in row.points) and row.trend.gamma.verdict is None
    assert found.fit.methods["depth_attention"].gamma.verdict is None
    text = markdown_report(study, CellStore.of(study), planted_results(study, lambda x: 1.3, seeds=range(3)))
    assert "too few seeds (3)" in text and "| data multiplier |" in text and "1.30x" in text


def test_the_report_states_data_and_compute_multipliers(study):
    text = markdown_report(study, CellStore.of(study), planted_results(study, lambda x: 1.3, noise=0.005))
    assert "| compute multiplier | FLOPs per token over vanilla |" in text and "| depth_attention | 1.0" in text
    assert "holds |" in text and "Joint fit over" in text
    assert "The primary reading is the first" in text and "Here they agree." in text  # 1.3 at every budget


def test_the_report_says_which_reading_stands_where_the_joint_fit_differs(study, monkeypatch):
    from depthattn.study.fits import Slope
    from depthattn.study.render.study_page import which_reading

    results = planted_results(study, lambda x: 1.3, noise=0.005)
    found = multipliers(study, results)
    assert found.rows[0].trend.holm_verdict == "holds"
    fit = found.fit
    growing = dataclasses.replace(fit.methods["depth_attention"], gamma=Slope(0.05, 0.01, 0.09, 0.01, 0.09),
                                  p_holm=0.001)
    text = "\n".join(which_reading(found, dataclasses.replace(fit, methods={"depth_attention": growing})))
    assert "They differ for depth_attention (holds; the joint fit: grows): there the primary reading's" in text


def test_the_baseline_curve_is_made_monotone_and_read_in_log_budget():
    curve = BaselineCurve.fit(np.array([1.0, 10.0, 100.0]), np.array([3.0, 2.0, 2.1]))  # a rise: pooled
    assert curve.loss.tolist() == pytest.approx([3.0, 2.05, 2.05])
    assert 1 < curve.tokens_for(2.525) < 10 and curve.tokens_for(3.0) == pytest.approx(1.0)  # on the monotone cubic
    assert curve.tokens_for(2.05) == pytest.approx(10.0)  # a flat stretch is reached at its start


def test_baseline_only_budgets_train_the_baseline_alone(tiny_data, tmp_path):
    from depthattn.study import pending_cells

    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", "{ short = 3, long = 6, longer = 9 }").replace(
        "branches = true", 'branches = true\nbaseline_only = ["longer"]')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    runs = {(c.method, c.setting["budget"]) for c in pending_cells(study, CellStore.of(study))}
    assert runs == {("vanilla", "longer"), ("depth_attention", "long")}
    assert not study.trains({"budget": "longer"}, "depth_attention") and study.trains({"budget": "longer"}, "vanilla")
    bad = axes.replace('baseline_only = ["longer"]', 'baseline_only = ["short"]')
    with pytest.raises(ValueError, match="each longer than every budget the other methods train"):
        Study.load(write_study(tmp_path, tiny_data, axes=bad, name="bad.toml"))



def test_budgets_only_the_baseline_trains_extend_its_curve_and_get_no_column(tiny_data, tmp_path):
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS).replace(
        "branches = true", 'branches = true\nbaseline_only = ["f"]')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    results = [r for r in planted_results(study, lambda x: 1.3, noise=0.005)
               if r.method == "vanilla" or r.setting["budget"] != "f"]
    found = multipliers(study, results)
    assert found.labels == ["a", "b", "c", "d", "e"] and found.seeds == [0, 1, 2, 3, 4]
    points = found.rows[0].points
    assert [p.label for p in points] == found.labels
    assert not points[-1].extrapolated  # the method's best loss is read inside vanilla's longer curve
    assert points[-1].multiplier == pytest.approx(1.3, rel=0.03)
    report = markdown_report(study, CellStore.of(study), results)
    table = ("| data multiplier |" + report.split("| data multiplier |")[1]).split("\n\n")[0].splitlines()
    assert len({line.count("|") for line in table}) == 1  # every row has the header's columns
    gains = ("| gain |" + report.split("| gain |")[1]).split("\n\n")[0].splitlines()
    assert gains[0].count("tok/param") == 5 and len({line.count("|") for line in gains}) == 1  # no column for f


def test_a_budget_only_the_baseline_trains_waits_for_every_seed_and_costs_none(tiny_data, tmp_path):
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS).replace(
        "branches = true", 'branches = true\nbaseline_only = ["f"]')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    results = [r for r in planted_results(study, lambda x: 1.3, noise=0.005)
               if r.setting["budget"] != "f" or (r.method == "vanilla" and r.seed < 2)]  # 2 of 5 seeds reached f
    found = multipliers(study, results)
    assert found.labels == ["a", "b", "c", "d", "e"] and found.seeds == [0, 1, 2, 3, 4]
    last = found.rows[0].points[-1]
    assert last.extrapolated and last.low <= last.multiplier <= last.high  # vanilla's curve ends at e


def test_a_budget_past_two_epochs_waits_for_every_seed_and_costs_none(study):
    """Seeds 3 and 4 have not reached f (5 epochs) for depth_attention: they stay, f is vanilla's curve alone until
    they do; a seed without a cell at a budget the verdict reads (within 2 epochs) is left out."""
    planted = planted_results(study, lambda x: 1.3, noise=0.005)
    results = [r for r in planted if not (r.method == "depth_attention" and r.setting["budget"] == "f" and r.seed > 2)]
    found = multipliers(study, results)
    assert found.seeds == [0, 1, 2, 3, 4] and found.rows[0].trend.gamma.verdict == "holds"
    points = found.rows[0].points
    assert [p.label for p in points] == ["a", "b", "c", "d", "e"]
    assert not points[-1].extrapolated  # e is read on vanilla's curve up to f
    assert [p.label for p in multipliers(study, planted).rows[0].points][-1] == "f"  # once they are in
    results = [r for r in planted if not (r.method == "depth_attention" and r.setting["budget"] == "c" and r.seed == 4)]
    assert multipliers(study, results).seeds == [0, 1, 2, 3]


def test_the_difference_figure_leaves_out_budgets_only_the_baseline_trains(tiny_data, tmp_path, monkeypatch):
    from depthattn.study.render import figures as plots

    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS).replace(
        "branches = true", 'branches = true\nbaseline_only = ["f"]')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    results = [r for r in planted_results(study, lambda x: 1.3, noise=0.005)
               if r.method == "vanilla" or r.setting["budget"] != "f"]
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    plots.plot_differences(study, results, tmp_path / "d.png")
    ticks = [t.get_text() for t in figures[0].axes[0].get_xticklabels()]
    assert ticks == ["a", "b", "c", "d", "e"]


def test_every_study_figure_keeps_a_long_title_inside_the_figure(tiny_data, tmp_path, monkeypatch):
    from depthattn.study import report
    from depthattn.study.render import figures as plots

    title = "Budget sweep at many layers: 0.5 to 20 tokens per parameter, vanilla alone to 30 (bytes, 16 layers x 64)"
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)
    study = Study.load(write_study(tmp_path, tiny_data, head=f'title = "{title}"', axes=axes))
    results = planted_results(study, lambda x: 1.3, noise=0.005)
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    plots.plot_differences(study, results, tmp_path / "d.png")
    plots.plot_curve_differences(study, results, tmp_path / "c.png")
    plots.plot_trend(study, [f for f in report.budget_trends(study, results)[""] if f], tmp_path / "t.png")
    plots.plot_multipliers(study, report.budget_multipliers(study, results)[""], tmp_path / "m.png")
    assert len(figures) == 4
    for fig in figures:
        fig.canvas.draw()
        width = fig.bbox.width
        titles = fig.texts + [ax.title for ax in fig.axes]
        assert any(title.split()[0] in t.get_text() for t in titles)
        for text in titles:
            box = text.get_window_extent(fig.canvas.get_renderer())
            assert box.x0 >= 0 and box.x1 <= width, text.get_text()


def test_the_fitted_multiplier_is_not_stated_far_past_the_fitted_budgets(study, monkeypatch):
    from depthattn.study import multiplier

    results = planted_results(study, lambda x: 1.3)
    assert multipliers(study, results).fit.at_printable  # 20 lies inside 10-500 tokens per parameter
    monkeypatch.setattr(multiplier, "FIT_AT", 5000.0)  # 10 x past the largest fitted budget
    assert not multipliers(study, results).fit.at_printable
    text = markdown_report(study, CellStore.of(study), results)
    assert "— (past 2 x the fitted budgets)" in text


@pytest.mark.parametrize("epochs_per_x", [0.01, 1.0], ids=["with-slope", "no-slope"])
def test_the_multiplier_figure_names_every_method(study, monkeypatch, tmp_path, epochs_per_x):
    """Where every budget reads the baseline's curve past 2 epochs there is no slope and no line; the legend
    still says whose points are whose."""
    from depthattn.study import report
    from depthattn.study.render import figures as plots

    results = planted_results(study, lambda x: 1.3, noise=0.005, epochs_per_x=epochs_per_x)
    assert math.isnan(report.budget_multipliers(study, results)[""].rows[0].trend.gamma.value) == (
        epochs_per_x == 1.0)
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    plots.plot_multipliers(study, report.budget_multipliers(study, results)[""], tmp_path / "m.png")
    legend = figures[0].axes[0].get_legend()
    assert legend is not None and any(t.get_text().startswith("depth_attention") for t in legend.get_texts())


def test_no_joint_fit_where_too_few_budgets_pass_over_the_data_at_most_twice(study):
    results = planted_results(study, lambda x: 1.3, epochs_per_x=1.0)  # 10 epochs and more at every budget
    assert multipliers(study, results).fit is None
    assert "No joint fit: it needs 3 budgets that pass over the data at most 2 times (here: 0)." in \
        markdown_report(study, CellStore.of(study), results)


def test_a_shallow_fitted_curve_read_far_past_its_end_is_infinite_without_an_overflow():
    import warnings

    curve = BaselineCurve(np.array([1.0, 10.0, 100.0]), np.array([3.0, 2.0, 1.5]), (1.0, 2.0, 1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert curve.tokens_for(1.01) == math.inf  # 100 x 50^1000 tokens per parameter: past any float
        assert curve.tokens_for(1.4999) == pytest.approx(100 * (0.5 / 0.4999) ** 1000)


def test_the_multiplier_figure_names_a_method_whose_every_multiplier_is_a_bound(study, monkeypatch, tmp_path):
    import warnings

    from depthattn.study.render import figures as plots

    bound = MultiplierPoint("a", 10.0, 30.0, 300.0, True, False, None, 10.0, 50.0)
    found = type("Found", (), {"rows": [MethodMultipliers("depth_attention", None, (bound,),
                                                          BudgetTrend(Slope(math.nan), math.nan))]})
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend"
        plots.plot_multipliers(study, found, tmp_path / "m.png")
    texts = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert texts == ["depth_attention: none within 2 x of the measured budgets"]


def test_a_joint_fit_parameter_on_its_bound_is_flagged(study):
    """A curve that flattens towards a negative floor: the fit's E cannot go below 0 and sits there."""
    results = planted_results(study, lambda x: 1.3, seeds=range(3), noise=0.005,
                              curve=lambda x: -0.1 + 3 * x ** -0.4)
    fit = multipliers(study, results).fit
    assert fit.E == pytest.approx(0, abs=1e-6) and fit.at_bounds == ["E = 0 (its lower bound)"]  # noqa: SIM300  (E: a field)
    text = markdown_report(study, CellStore.of(study), results)
    assert "E = 0.000," in text and "**at a bound of the fit**: E = 0 (its lower bound)" in text
    # the planted L(x) = 1 + 2 x^-0.4 places every parameter inside its bounds: no flag
    results = planted_results(study, lambda x: 1.3, seeds=range(3), noise=0.005)
    assert multipliers(study, results).fit.at_bounds == []
    assert "at a bound of the fit" not in markdown_report(study, CellStore.of(study), results)


def test_a_sweep_where_only_the_baseline_has_cells_has_no_multipliers_yet(study):
    """As a new learning rate's first cells arrive: the report waits instead of failing."""
    baseline_only = [r for r in planted_results(study, lambda x: 1.3) if r.method == study.baseline]
    assert baseline_only and multipliers(study, baseline_only) is None
    assert "| data multiplier |" not in markdown_report(study, CellStore.of(study), baseline_only)


def test_each_model_of_a_ladder_is_priced_at_its_own_flops_ratio():
    """MoDA costs 1.08x vanilla's FLOPs at the ladder's 33m and 1.24x at 361m: every size was divided by the first's."""
    from depthattn.study.report import budget_multipliers, flops_ratios

    ladder = Study.load("configs/study/ladder.toml")
    results = []
    for size in ("33m", "361m"):
        for label in ("1", "2", "5"):
            x = float(label)
            for seed in range(2):
                for method, value in (("vanilla", loss(x)), ("moda", loss(1.3 * x))):
                    results.append(CellResult(method, seed, value + 0.01 * seed, {
                        "train_tokens": 1000, "params_total": 100, "data_epochs": 0.01 * x,
                        "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "curve": [], "val_bits_per_byte": value},
                        setting={"size": size, "budget": label}))
    found = budget_multipliers(ladder, results)
    ratios = {label: next(row.flops_ratio for row in multipliers.rows if row.method == "moda")
              for label, multipliers in found.items()}
    small, large = (flops_ratios(ladder, {"size": size, "budget": "1"})["moda"] for size in ("33m", "361m"))
    assert large > small * 1.1
    assert sorted(ratios.values()) == pytest.approx([small, large])


def test_gamma_is_refitted_without_the_budgets_that_read_the_curve_past_two_epochs(study):
    """The rule fits gamma over the budgets the methods train within 2 epochs; a multiplier read on the baseline's
    curve past 2 epochs (‡) stays in that fit. A method worth 1.3x up to 200 tokens per parameter and 1.8x at 500,
    whose reading there (900) passes 2 epochs: the sensitivity leaves that budget out and finds the constant."""
    results = planted_results(study, lambda x: 1.3 if x < 400 else 1.8, noise=0.002, epochs_per_x=0.004)
    row = multipliers(study, results).rows[0]
    assert row.points[-1].read_epochs > 2 and row.points[-2].read_epochs < 2
    within = row.trend_within_reading
    assert within.gamma.value == pytest.approx(0.0, abs=0.01) and within.holm_verdict == "holds"
    assert row.trend.gamma.value > 0.04 and row.trend.holm_verdict == "grows"
    text = markdown_report(study, CellStore.of(study), results)
    assert "Sensitivity, read after the cells ran" in text and "**holds** (the rule's reading: grows)" in text
    # where no fitted budget reads past 2 epochs there is nothing to refit and nothing printed
    plain = planted_results(study, lambda x: 1.3, noise=0.002, epochs_per_x=0.001)
    assert multipliers(study, plain).rows[0].trend_within_reading is None
    assert "Sensitivity, read after" not in markdown_report(study, CellStore.of(study), plain)
