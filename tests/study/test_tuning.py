"""A learning-rate sweep's tuned reading recovers what is planted: a method's multiplier on the baseline's best-rate
envelope, each at its own best rate, and a gain that only an untuned baseline gave is not shown once tuned."""

import math
import re

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


def planted(study, efficiency, seeds=range(5), noise=0.004, epochs_per_x=0.001):
    """Cells whose loss at x tokens per parameter is loss(efficiency[method][rate] x): a method at a rate is worth
    that multiple of the baseline's data at its best rate (1), or of x where it is a function of x. Seed noise is
    independent per cell."""
    rng = np.random.default_rng(0)
    out = []
    for rate in study.axes[0].values:
        for label, steps in study.branch_axis.values.items():
            x = steps * 10.0
            for seed in seeds:
                shift = 0.01 * seed  # pairs every cell of a seed
                for method, by_rate in efficiency.items():
                    worth = by_rate[rate](x) if callable(by_rate[rate]) else by_rate[rate]
                    value = loss(worth * x) + shift + noise * rng.standard_normal()
                    out.append(CellResult(method, seed, value, {
                        "train_tokens": steps * 1000, "params_total": 100, "data_epochs": epochs_per_x * x,
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


def test_a_rate_where_a_seed_diverged_is_never_the_best_and_the_seed_stays(study):
    """A diverged run (`CellStore.read_diverged`: infinite loss) makes its rate's mean infinite at the budgets it
    did not reach; the seed keeps its cells at the other rates, where a missing cell would drop it from all."""
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}

    def diverged(result):  # depth_attention's seed 3 at 4e-3, from budget "c" on
        return (result.method == "depth_attention" and result.seed == 3 and result.setting["lr"] == "4e-3"
                and result.setting["budget"] >= "c")

    cells = planted(study, efficiency)
    with_diverged = [CellResult(r.method, r.seed, math.inf, {"diverged": "the training loss became nan at step 9"},
                                setting=r.setting) if diverged(r) else r for r in cells]
    tuning = tuned_multipliers(study, with_diverged, verdict_at="b")
    assert tuning.seeds == [0, 1, 2, 3, 4]
    best = {p.label: p for p in tuning.methods[0].best}
    assert best["b"].rate == "4e-3" and best["b"].multiplier == pytest.approx(1.3, rel=0.05)
    for label in ("c", "d"):
        assert best[label].rate == "2e-3" and best[label].multiplier == pytest.approx(1.1, rel=0.05)
    assert tuned_multipliers(study, [r for r in cells if not diverged(r)], verdict_at="b").seeds == [0, 1, 2, 4]


def test_a_tuned_reading_beyond_the_envelopes_budgets_is_marked_and_far_beyond_a_bound(study):
    """As an untuned reading: † beyond the envelope's measured budgets (10 to 500 tokens per parameter), a bound
    more than twice beyond; the published 0.5 column's 0.81x read vanilla's envelope at 0.40 unmarked."""
    from depthattn.study.render.analyses import format_tuned_point

    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.2, "2e-3": 0.3, "4e-3": 1.3}}
    method = tuned_multipliers(study, planted(study, efficiency), verdict_at="b").methods[0]
    best, at_reference = {p.label: p for p in method.best}, {p.label: p for p in method.reference}
    assert not best["c"].extrapolated and "†" not in format_tuned_point(best["c"])
    assert best["f"].extrapolated and best["f"].printable  # read at about 1.3 x 500
    assert re.fullmatch(r"1\.\d\dx \[\d\.\d\d, \d\.\d\d\]† @4e-3ᵉ", format_tuned_point(best["f"]))
    assert not at_reference["a"].printable  # read at about 0.3 x 10, over twice below the envelope's 10
    assert format_tuned_point(at_reference["a"]) == "< 0.50x† @2e-3"
    repeated = tuned_multipliers(study, planted(study, efficiency, epochs_per_x=0.005), verdict_at="b").methods[0]
    marks = {p.label: format_tuned_point(p).split(" @")[0][-2:] for p in repeated.best}
    assert marks["e"][-1] == "]" and marks["f"] == "†‡"  # read at 1.3 x 200 x 0.005, 1.3 epochs; at 500, 3.3


def test_a_tuned_page_flags_repeated_data_past_the_studys_own_limit(study):
    """A study whose rule flags from one epoch (`flag_epochs`) marks ‡ a reading at 1.3 epochs that the default
    limit of two leaves unmarked, in its rows and in its legend."""
    import dataclasses

    from depthattn.study.render.analyses import format_tuning

    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.2, "2e-3": 0.3, "4e-3": 1.3}}
    tuning = tuned_multipliers(study, planted(study, efficiency, epochs_per_x=0.005), verdict_at="b")
    best_row = [line for line in format_tuning(study, tuning) if line.startswith("| depth_attention, best |")]
    assert "‡" not in best_row[0].split(" | ")[5]  # budget e, read at about 1.3 epochs
    stricter = dataclasses.replace(study, flag_epochs=1.0)
    lines = format_tuning(stricter, tuning)
    best_row = [line for line in lines if line.startswith("| depth_attention, best |")]
    assert "‡" in best_row[0].split(" | ")[5] and "‡: read on it past 1 epochs." in lines[0]


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


def test_a_baseline_tuned_alone_is_the_envelope_each_method_is_read_at_its_one_rate(tiny_data, tmp_path):
    """Rates only the baseline trains (the lr axis's baseline_only): no other method's cell there, each method read
    at the rate it trained on the baseline's envelope, which a better rate of the baseline's lowers."""
    from depthattn.study import pending_cells

    axes = RATES.replace("}\n", '}\nbaseline_only = ["1e-3", "4e-3"]\n') + WSD_BUDGETS.replace(
        "{ short = 3, long = 6 }", BUDGETS)
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes, seeds=range(5)))
    pending = {(c.method, c.setting["lr"]) for c in pending_cells(study, CellStore.of(study))}
    assert pending == {("vanilla", "1e-3"), ("vanilla", "2e-3"), ("vanilla", "4e-3"), ("depth_attention", "2e-3")}
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 1.25},  # its best rate is not the reference
                  "depth_attention": {"1e-3": 1.0, "2e-3": 1.3, "4e-3": 1.0}}  # cells left out below
    cells = [r for r in planted(study, efficiency) if study.trains(r.setting, r.method)]
    tuning = tuned_multipliers(study, cells, verdict_at="b")
    assert tuning.baseline_rates == ["4e-3"] * len(tuning.labels)
    (method,) = tuning.methods
    assert method.rates == ["2e-3"] and [p.rate for p in method.best] == ["2e-3"] * len(tuning.labels)
    at_b = next(p for p in method.best if p.label == "b")
    assert at_b.multiplier == pytest.approx(1.3 / 1.25, rel=0.03) and not at_b.at_edge
    text = markdown_report(study, CellStore.of(study), cells)
    assert "Only vanilla is tuned: every other method trained at 2e-3 and is read there" in text
    assert "| depth_attention, 2e-3 (its only rate) |" in text
    assert "| depth_attention, best |" not in text
    # a rate only the baseline trains has no gains against the budget: no empty table, no heading for one
    assert "**lr=2e-3**, against the budget:" in text and "**lr=1e-3**, against the budget:" not in text
    assert "| gain |  |" not in text


def test_the_tuned_slope_reads_a_flat_multiplier_as_flat_and_a_growing_one_as_growing(study):
    """gamma of the best-rate multipliers: a method worth 1.2x at every budget has a slope whose interval holds 0;
    one worth 1.1 (x / 10)^0.1 has a slope near 0.1 whose interval lies above 0. The table prints it, no verdict."""
    vanilla = {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8}
    flat = tuned_multipliers(study, planted(study, {"vanilla": vanilla, "depth_attention": {
        "1e-3": 0.9, "2e-3": 1.0, "4e-3": 1.2}}), verdict_at="b").methods[0]  # its best rate is not the reference
    assert flat.gamma.value == pytest.approx(0, abs=0.02) and flat.gamma.t_low < 0 < flat.gamma.t_high
    growing = {"vanilla": vanilla, "depth_attention": {"1e-3": 0.9, "2e-3": 1.0,
                                                       "4e-3": lambda x: 1.1 * (x / 10) ** 0.1}}
    grows = tuned_multipliers(study, planted(study, growing), verdict_at="b").methods[0].gamma
    assert grows.value == pytest.approx(0.1, abs=0.03) and 0 < grows.t_low <= 0.1 <= grows.t_high
    text = markdown_report(study, CellStore.of(study), planted(study, growing))
    assert f"| {grows.value:+.3f} [{grows.t_low:+.3f}, {grows.t_high:+.3f}] | " in text
    # as every gamma, over the budgets trained within 2 epochs: a jump at 500 tokens per parameter (2.5 epochs) is
    # outside it
    jumps = {"vanilla": vanilla, "depth_attention": {"1e-3": 0.9, "2e-3": 1.0,
                                                     "4e-3": lambda x: 1.2 if x < 400 else 1.8}}
    flat = tuned_multipliers(study, planted(study, jumps, epochs_per_x=0.005), verdict_at="b").methods[0].gamma
    assert flat.value == pytest.approx(0, abs=0.02)


def test_below_five_seeds_there_are_multipliers_but_no_intervals_or_verdict(study):
    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}
    tuning = tuned_multipliers(study, planted(study, efficiency, seeds=range(3)), verdict_at="b")
    method = tuning.methods[0]
    assert all(p.low is None for p in method.best) and method.verdict is None and method.gamma.t_low is None


def test_where_every_cell_stores_its_documents_losses_the_tuned_interval_holds_their_variance(study):
    from depthattn.study.render.analyses import format_tuning
    from tests.study.test_calibrated import width, with_documents

    efficiency = {"vanilla": {"1e-3": 0.7, "2e-3": 1.0, "4e-3": 0.8},
                  "depth_attention": {"1e-3": 0.8, "2e-3": 1.1, "4e-3": 1.3}}
    plain = planted(study, efficiency)
    spread = np.random.default_rng(1).standard_normal(40)
    bare = tuned_multipliers(study, plain, verdict_at="b")
    both = tuned_multipliers(study, [with_documents(r, spread) for r in plain], verdict_at="b")
    assert not bare.documents and both.documents
    for kind in ("best", "reference"):
        for a, b in zip(getattr(bare.methods[0], kind), getattr(both.methods[0], kind), strict=True):
            assert a.multiplier == b.multiplier and a.rate == b.rate  # the same reading, a wider interval
            assert width(b.low, b.high) > 1.05 * width(a.low, a.high)
    assert both.methods[0].p_holm > bare.methods[0].p_holm
    assert "the held-out documents' variance added" in " ".join(format_tuning(study, both))
    assert "the seeds' variance only" in " ".join(format_tuning(study, bare))
    # a split of fewer documents than groups (the embedded corpus's 9) leaves a group empty: no documents' variance
    few = tuned_multipliers(study, [with_documents(r, spread[:9]) for r in plain], verdict_at="b")
    assert not few.documents and few.methods[0].best == bare.methods[0].best
    assert few.documents_note == ("the held-out split has 9 documents, fewer than the 10 groups its jackknife "
                                  "leaves out in turn")
    assert "the seeds' variance only: the held-out split has 9 documents" in " ".join(format_tuning(study, few))
    assert bare.documents_note.startswith("not every cell stores") and both.documents_note == ""


# Coverage of the tuned intervals at five seeds: planted learning-rate sweeps whose vanilla curves per rate are the
# committed cells' means (seed 0 at 1e-3 and 4e-3, five seeds at 2e-3; 8e-3 planted a little worse than 4e-3 late),
# so that rates nearly tie at the long budgets as they do there, with the cells' seed noise (tests/study/
# test_calibrated.py). The interval's target is the reading on noise-free tables.
X = np.array([0.5, 1.0, 2.0, 5.0, 10.0, 20.0])
VANILLA_BY_RATE = {"1e-3": [3.1693, 2.6291, 2.2145, 1.6876, 1.4692, 1.3475],
                   "2e-3": [2.7897, 2.4283, 2.0657, 1.6319, 1.4498, 1.3453],
                   "4e-3": [2.6621, 2.4449, 2.1273, 1.6527, 1.4555, 1.3422],
                   "8e-3": [2.6000, 2.4700, 2.1700, 1.6800, 1.4700, 1.3500]}
METHOD_BUDGETS = 5  # the method trains to 10 tokens per parameter, vanilla to 20


def planted_rate_tables(efficiency: dict[str, float], rng, seeds: int = 5,
                        alone: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Per rate, vanilla's and the method's loss tables (budgets, seeds); the method at a rate reaches vanilla's loss
    at that rate with `efficiency[rate]` x its tokens (along the rate's fitted power law). rng None: no noise.
    `alone`: vanilla alone is tuned, the method trains at 2e-3 only."""
    from tests.study.test_calibrated import RUN_SHARE, SEED_SD, planted_shape

    def noisy(curve):
        if rng is None:
            return np.repeat(curve[:, None], seeds, 1)
        run, each = rng.standard_normal(seeds)[None, :], rng.standard_normal((len(X), seeds))
        return curve[:, None] + SEED_SD[:, None] * (math.sqrt(RUN_SHARE) * run + math.sqrt(1 - RUN_SHARE) * each)

    tables = {}
    for rate, means in VANILLA_BY_RATE.items():
        vanilla = np.array(means)
        E, B, beta = planted_shape(tuple(X), tuple(means))
        method = vanilla + B * (efficiency[rate] * X) ** -beta - B * X ** -beta
        method[METHOD_BUDGETS:] = math.nan
        tables[rate] = {"vanilla": noisy(vanilla), "m": noisy(method)}
        if alone and rate != "2e-3":
            del tables[rate]["m"]
    return tables


def tuned_coverage(efficiency: dict[str, float], sweeps: int, seeds: int = 5,
                   alone: bool = False) -> tuple[np.ndarray, float]:
    """How often the calibrated intervals held their targets: the best-rate multiplier's, per budget of the method,
    and its slope gamma's over those budgets."""
    from depthattn.study.calibrated import jackknife_t, log_jackknife_t
    from depthattn.study.fits import log_log_fit
    from depthattn.study.tuning import envelope_multipliers

    def read(tables, keep):
        return envelope_multipliers(X, tables, "vanilla", "m", "2e-3", keep)[0][:METHOD_BUDGETS]

    def gamma(k):
        return log_log_fit(X[:METHOD_BUDGETS], k)[0]

    everyone = np.arange(seeds)
    target = read(planted_rate_tables(efficiency, None, seeds, alone), everyone)
    rng, held, slope_held = np.random.default_rng(0), [], []
    for _ in range(sweeps):
        tables = planted_rate_tables(efficiency, rng, seeds, alone)
        loo = np.array([read(tables, np.delete(everyone, j)) for j in range(seeds)])
        k = read(tables, everyone)
        low, high = log_jackknife_t(k, loo)
        held.append((low <= target) & (target <= high))
        low, high = jackknife_t(np.array(gamma(k)), np.array([gamma(left_out) for left_out in loo]))
        slope_held.append(low <= gamma(target) <= high)
    return np.mean(held, axis=0), float(np.mean(slope_held))


@pytest.mark.parametrize("efficiency, alone", [
    ({"1e-3": 1.0, "2e-3": 1.0, "4e-3": 1.0, "8e-3": 1.0}, False),  # no gain at any rate
    ({"1e-3": 1.0, "2e-3": 1.1, "4e-3": 1.3, "8e-3": 1.3}, False),  # a gain whose best rate is not vanilla's
    ({"1e-3": 1.0, "2e-3": 1.0, "4e-3": 1.0, "8e-3": 1.0}, True),  # vanilla alone tuned, the method at 2e-3 only
    ({"1e-3": 1.0, "2e-3": 1.2, "4e-3": 1.0, "8e-3": 1.0}, True),
], ids=["null", "gain-at-other-rates", "baseline-alone-null", "baseline-alone-gain"])
def test_the_tuned_interval_holds_95_percent_with_the_rate_choices_redone(efficiency, alone):
    # seeded, about 10 s each; over 1,000 sweeps every budget's rate was 0.947 to 0.964 in both plants, and an 85%
    # interval's 0.79 to 0.85; the slope gamma's 0.953 and 0.947 (200 sweeps: a rate's standard error is about 0.015);
    # with vanilla alone tuned 0.947 to 0.967, the slope's 0.952 and 0.959
    rates, slope = tuned_coverage(efficiency, sweeps=200, alone=alone)
    assert rates.mean() >= 0.93 and rates.min() >= 0.90, rates
    assert slope >= 0.93, slope
