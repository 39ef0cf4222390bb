"""A learning-rate sweep's tuned reading recovers what is planted: a method's multiplier on the baseline's best-rate
envelope, each at its own best rate, and a gain that only an untuned baseline gave is not shown once tuned."""

import math

import numpy as np
import pytest

from depthattn.study import Study
from depthattn.study.records import CellResult
from depthattn.study.report import markdown_report
from depthattn.study.store import CellStore
from depthattn.study.tuning import tuned_multipliers
from tests.study.test_multiplier import BUDGETS, fewer_resamples, loss  # noqa: F401 (a fixture)
from tests.study.test_study import WSD_BUDGETS, write_study

RATES = '[axes.lr]\nkey = "optim.lr"\nvalues = { "1e-3" = 1e-3, "2e-3" = 2e-3, "4e-3" = 4e-3 }\n'


@pytest.fixture
def study(tiny_data, tmp_path):
    axes = RATES + WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)
    return Study.load(write_study(tmp_path, tiny_data, axes=axes, seeds=range(5)))


def planted(study, efficiency, seeds=range(5), noise=0.004):
    """Cells whose loss at x tokens per parameter is loss(efficiency[method][rate] x): a method at a rate is worth
    that multiple of the baseline's data at its best rate (1). Seed noise is independent per cell."""
    rng = np.random.default_rng(0)
    out = []
    for rate in study.axes[0].values:
        for label, steps in study.branch_axis.values.items():
            x = steps * 10.0
            for seed in seeds:
                shift = 0.01 * seed  # pairs every cell of a seed
                for method, by_rate in efficiency.items():
                    value = loss(by_rate[rate] * x) + shift + noise * rng.standard_normal()
                    out.append(CellResult(method, seed, value, {
                        "train_tokens": steps * 1000, "params_total": 100, "data_epochs": 0.001 * x,
                        "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "curve": [], "val_bits_per_byte": value},
                        setting={"lr": rate, "budget": label}))
    return out


def test_a_gain_that_holds_at_every_rate_survives_tuning(study):
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}  # its best rate is another one
    tuning = tuned_multipliers(study, planted(study, efficiency), verdict_at="b")
    assert tuning.baseline_rates == ["2e-3"] * len(tuning.labels)
    method = tuning.methods[0]
    inside = [p for p in method.best if 20 <= float(p.label and tuning.x[tuning.labels.index(p.label)]) <= 200]
    assert inside
    for point in inside:
        assert point.rate == "4e-3" and point.at_edge  # the grid's highest: flagged
        assert point.multiplier == pytest.approx(1.3, rel=0.05) and point.low <= 1.3 <= point.high
    at_reference = {p.label: p.multiplier for p in method.reference}
    assert at_reference["b"] == pytest.approx(1.1, rel=0.05)
    assert method.verdict == "survives tuning" and method.p_holm < 0.05
    text = markdown_report(study, CellStore.of(study), planted(study, efficiency))
    assert "**Tuned**: multipliers against vanilla's envelope" in text and "survives tuning" in text


def test_a_gain_over_an_untuned_baseline_alone_is_not_shown_once_tuned(study):
    efficiency = {"vanilla": {"1e-3": 1.0, "2e-3": 0.8, "4e-3": 0.6},  # the reference rate is not vanilla's best
                  "depth_attention": {"1e-3": 0.95, "2e-3": 1.0, "4e-3": 0.7}}
    tuning = tuned_multipliers(study, planted(study, efficiency), verdict_at="b")
    method = tuning.methods[0]
    reference = {p.label: p for p in method.reference}
    best = {p.label: p for p in method.best}
    assert reference["b"].multiplier == pytest.approx(1.0, rel=0.05)  # 1.0 against vanilla's best, not 1.25
    assert best["b"].multiplier == pytest.approx(1.0, rel=0.05) and best["b"].rate == "2e-3"
    assert method.verdict in ("not shown", "reversed") and not math.isnan(method.p_holm)  # never "survives"


def test_below_five_seeds_there_are_multipliers_but_no_intervals_or_verdict(study):
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}
    tuning = tuned_multipliers(study, planted(study, efficiency, seeds=range(3)), verdict_at="b")
    method = tuning.methods[0]
    assert all(p.low is None for p in method.best) and method.verdict is None
