"""The calibrated intervals hold their coverage at five seeds where the pre-registered percentile bootstrap does not:
planted sweeps with a known multiplier and the committed cells' seed noise, analysed by the study's own functions:
multipliers and gamma, the ratio of two methods' multipliers, the joint fit, the depth axis's slopes and surface,
ten seeds, and the held-out documents' variance added where cells store it (the tuned reading's:
tests/study/test_tuning.py)."""

import functools
import math

import numpy as np
import pytest

from depthattn.study.calibrated import holm, jackknife_p, jackknife_t, log_jackknife_t
from depthattn.study.curve import BaselineCurve, power_law
from depthattn.study.fits import log_log_fit, percentile_interval
from depthattn.study.sweep import data_multipliers, leave_one_out, resampled_multipliers
from tests.study.test_multiplier import fewer_resamples  # noqa: F401 (a fixture: fewer seed resamples)

X = np.array([0.5, 1.0, 2.0, 5.0, 10.0, 20.0])  # tokens per parameter: the methods' budgets, and vanilla's to 20
# vanilla's mean loss there on Wikipedia (budget_sweep_wiki's committed cells, five seeds): the planted curve's shape
VANILLA = np.array([2.7904, 2.4083, 2.0547, 1.6225, 1.4474, 1.3423])
SEED_SD = np.array([0.012, 0.017, 0.021, 0.017, 0.010, 0.009])  # the cells' sd over seeds at each budget
RUN_SHARE = 0.45  # the correlation of a run's deviations across its budgets (its branches share the run)
K = 1.12  # the planted multiplier, the same at every budget: gamma = 0
METHOD_BUDGETS = slice(0, 5)  # 0.5 to 10; the method has no cell at 20, where only vanilla trains


@functools.cache
def planted_shape(x: tuple[float, ...], loss: tuple[float, ...]) -> tuple[float, float, float]:
    """The power law E + B x^-beta of a planted curve, fitted once (every planted sweep of it shares it)."""
    return power_law(np.array(x), np.array(loss))


def planted(rng, seeds, multiplier=K, offset=0.0):
    """(vanilla, method) losses (budgets, seeds): the method reaches vanilla's loss at `multiplier` (at each budget,
    or one for all) x its tokens; `offset` shifts both curves (a deeper or shallower model's)."""
    E, B, beta = planted_shape(tuple(X), tuple(VANILLA))
    curves = [offset + E + B * X ** -beta, offset + E + B * (multiplier * X) ** -beta]

    def noise():
        run = rng.standard_normal(seeds)[None, :]
        each = rng.standard_normal((len(X), seeds))
        return SEED_SD[:, None] * (math.sqrt(RUN_SHARE) * run + math.sqrt(1 - RUN_SHARE) * each)

    base, method = (curve[:, None] + noise() for curve in curves)
    method[METHOD_BUDGETS.stop:] = math.nan
    return base, method


def coverage(sweeps: int, seeds: int, resamples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Per interval, how often it held the planted value over `sweeps` planted sweeps: the multiplier at each of the
    method's budgets, and gamma."""
    rng = np.random.default_rng(seed)
    held = {"percentile": [], "calibrated": []}
    for _ in range(sweeps):
        base, method = planted(rng, seeds)
        x, budgets = X[METHOD_BUDGETS], range(METHOD_BUDGETS.stop)
        k = data_multipliers(X, BaselineCurve.fit(X, base.mean(axis=1)), method)[0][METHOD_BUDGETS]
        gamma = log_log_fit(x, k)[0]
        draws = rng.integers(0, seeds, size=(resamples, seeds))
        boot = resampled_multipliers(X, base, {"m": method}, draws)["m"][:, METHOD_BUDGETS]
        loo = resampled_multipliers(X, base, {"m": method}, leave_one_out(seeds))["m"][:, METHOD_BUDGETS]
        boot_gamma = np.array([log_log_fit(x, b)[0] for b in boot])
        loo_gamma = np.array([log_log_fit(x, b)[0] for b in loo])
        bounds = {"percentile": [percentile_interval(boot[:, i]) for i in budgets]
                  + [percentile_interval(boot_gamma)],
                  "calibrated": [tuple(map(float, log_jackknife_t(k[i], loo[:, i]))) for i in budgets]
                  + [tuple(map(float, jackknife_t(np.array(gamma), loo_gamma)))]}
        for name, intervals in bounds.items():
            truths = [K] * len(budgets) + [0.0]
            held[name].append([low <= truth <= high for (low, high), truth in zip(intervals, truths, strict=True)])
    return {name: np.mean(rows, axis=0) for name, rows in held.items()}


def test_the_calibrated_interval_holds_95_percent_where_the_percentile_bootstrap_does_not():
    rates = coverage(sweeps=200, seeds=5, resamples=100)  # seeded: the same sweeps on every run (about 20 s)
    # 200 sweeps: a rate's standard error is about 0.015 at 0.95; with 400 sweeps and 200 resamples the calibrated
    # rates were 0.945 to 0.98 and the percentile ones 0.83 to 0.86
    assert rates["calibrated"].min() >= 0.93, rates
    assert rates["percentile"].mean() <= 0.90, rates  # the pre-registered rule: about 0.85 at five seeds


def test_at_ten_seeds_the_calibrated_interval_still_holds_its_coverage():
    """The check the ten-seed sweeps pre-registered (configs/study/budget_sweep*_seeds10.toml). At the smallest budget,
    where the method's loss lies near the edge of vanilla's measured curve, it covered 0.927 of 1,200 planted sweeps
    (the percentile interval 0.82); at the others 0.93 to 0.97."""
    rates = coverage(sweeps=300, seeds=10, resamples=20)["calibrated"]  # seeded, about 4 s
    assert rates.mean() >= 0.93 and rates.min() >= 0.90, rates


def test_the_ratio_of_two_methods_multipliers_holds_95_percent():
    """The orderings' contrast (analyses/orderings.py): method a's multiplier over method b's, leave one seed out."""
    rng, seeds, held, truth = np.random.default_rng(1), 5, [], K / 1.05
    for _ in range(300):
        base, a = planted(rng, seeds)
        _, b = planted(rng, seeds, multiplier=1.05)
        curve = BaselineCurve.fit(X, base.mean(axis=1))
        ratio = (data_multipliers(X, curve, a)[0] / data_multipliers(X, curve, b)[0])[METHOD_BUDGETS]
        loo = resampled_multipliers(X, base, {"a": a, "b": b}, leave_one_out(seeds))
        low, high = log_jackknife_t(ratio, (loo["a"] / loo["b"])[:, METHOD_BUDGETS])
        held.append((low <= truth) & (truth <= high))
    rates = np.mean(held, axis=0)
    assert rates.mean() >= 0.93 and rates.min() >= 0.90, rates


def test_the_joint_fits_calibrated_intervals_hold_95_percent():
    """The joint fit (study/multiplier.py) of vanilla and a method worth K x^gamma x vanilla's data, on a curve of
    its own form: gamma's and the multiplier at 20 tokens per parameter's intervals, the fit redone with each seed
    left out (the bootstrap percentiles covered 0.86 of 100 such sweeps)."""
    from depthattn.study.multiplier import FIT_AT, joint_fit

    E, B, beta = planted_shape(tuple(X), tuple(VANILLA))
    x, gamma, seeds = X[METHOD_BUDGETS], 0.03, 5
    rng, held = np.random.default_rng(3), {"gamma": [], "at": []}

    def noise():
        run, each = rng.standard_normal(seeds)[None, :], rng.standard_normal((len(x), seeds))
        return SEED_SD[METHOD_BUDGETS, None] * (math.sqrt(RUN_SHARE) * run + math.sqrt(1 - RUN_SHARE) * each)

    for _ in range(300):  # about 4 s
        table = {"vanilla": (E + B * x ** -beta)[:, None] + noise(),
                 "m": (E + B * (K * x ** (1 + gamma)) ** -beta)[:, None] + noise()}
        row = joint_fit(x, table, "vanilla", None, seeds).methods["m"]
        held["gamma"].append(row.gamma.t_low <= gamma <= row.gamma.t_high)
        held["at"].append(row.at_t_low <= K * FIT_AT ** gamma <= row.at_t_high)
    rates = {name: float(np.mean(values)) for name, values in held.items()}
    assert min(rates.values()) >= 0.93, rates


# The depth axis (analyses/depth_axis.py): sweeps at 4, 8 and 16 layers, each with its own seeds and the committed
# cells' noise, a multiplier planted on the surface log k = a + gamma log x + delta log L + eta log x log L; its
# intervals leave seed position j out of every sweep (a grouped jackknife).
DEPTHS = (4, 8, 16)
SURFACE = (math.log(1.1), 0.03, 0.05, -0.02)  # a, gamma, delta, eta: the gain from depth shrinks with the budget


def planted_depth_sweep(rng, depth: int, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(multipliers at the method's budgets, the same with each seed left out (seeds, budgets)) of one sweep."""
    a, gamma, delta, eta = SURFACE
    x = X[METHOD_BUDGETS]
    k = math.exp(a) * x ** (gamma + eta * math.log(depth)) * depth ** delta
    base, method = planted(rng, seeds, multiplier=np.concatenate([k, [1.0]]), offset=0.06 * math.log2(8 / depth))
    curve = BaselineCurve.fit(X, base.mean(axis=1))
    return (data_multipliers(X, curve, method)[0][METHOD_BUDGETS],
            resampled_multipliers(X, base, {"m": method}, leave_one_out(seeds))["m"][:, METHOD_BUDGETS])


def test_the_depth_axis_intervals_hold_95_percent():
    """eta (the budget x depth term), delta at 1 and 10 tokens per parameter, and each budget's slope in depth."""
    from depthattn.study.fits import log_surface_fit

    a, gamma, delta, eta = SURFACE
    x, depths, seeds = X[METHOD_BUDGETS], np.array(DEPTHS, dtype=float), 5
    rng, held = np.random.default_rng(2), {"eta": [], "delta at 1": [], "delta at 10": [], "slope per budget": []}

    def points(ks):
        return [(xi, depth, k[i]) for depth, k in zip(DEPTHS, ks, strict=True) for i, xi in enumerate(x)]

    def check(name, value, left_out, truth):
        low, high = jackknife_t(np.array(value), np.asarray(left_out))
        held[name].append(bool(low <= truth <= high))

    for _ in range(800):  # about 10 s; 500 gave 0.936 to 0.954
        found = [planted_depth_sweep(rng, depth, seeds) for depth in DEPTHS]
        fit = log_surface_fit(points([k for k, _ in found]), interaction=True)
        loo = np.array([log_surface_fit(points([left[j] for _, left in found]), interaction=True)
                        for j in range(seeds)])
        check("eta", fit[3], loo[:, 3], eta)
        for at in (1.0, 10.0):
            check(f"delta at {at:g}", fit[2] + fit[3] * math.log(at), loo[:, 2] + loo[:, 3] * math.log(at),
                  delta + eta * math.log(at))
        for i, xi in enumerate(x):
            slopes = [log_log_fit(depths, np.array([left[j, i] for _, left in found]))[0] for j in range(seeds)]
            check("slope per budget", log_log_fit(depths, np.array([k[i] for k, _ in found]))[0], slopes,
                  delta + eta * math.log(xi))
    rates = {name: float(np.mean(values)) for name, values in held.items()}
    # over 3,000 planted axes every rate was 0.949 to 0.957 (with eta 0 too)
    assert min(rates.values()) >= 0.93, rates


def test_jackknife_t_of_a_mean_is_the_t_interval():
    from scipy.stats import t

    values = np.array([1.0, 1.4, 0.7, 1.9, 1.2])
    loo = np.array([np.delete(values, j).mean() for j in range(5)])
    low, high = jackknife_t(np.array(values.mean()), loo)
    half = t.ppf(0.975, 4) * values.std(ddof=1) / math.sqrt(5)  # for a mean the jackknife is the usual interval
    assert (float(low), float(high)) == pytest.approx((values.mean() - half, values.mean() + half))
    assert jackknife_p(values.mean(), loo) == pytest.approx(t.sf(values.mean() / (half / t.ppf(0.975, 4)), 4) * 2)
    assert all(math.isnan(v) for v in jackknife_t(np.array(1.0), loo[:4]))  # below five seeds: no interval


def test_holm_adjusts_a_family_step_down():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06)  # monotone: b keeps c's 0.06
    # a member without a test stays in the family (its size 4): the others' adjustments are not shrunk
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": math.nan})
    assert adjusted["a"] == pytest.approx(0.04) and adjusted["c"] == pytest.approx(0.09)
    assert adjusted["b"] == pytest.approx(0.09) and math.isnan(adjusted["d"])


def with_documents(result, spread: np.ndarray, scale: dict[str, float] | None = None):
    """`result` with each held-out document's loss stored: len(spread) documents of 25 tokens, document d's loss
    the cell's plus 0.3 spread[d] times its method's `scale` (by default 1 for vanilla, 1.5 for the others), the
    split's loss the cell's."""
    from depthattn.study.records import CellResult

    tokens = np.full(len(spread), 25)
    factor = (scale or {}).get(result.method, 1.0 if result.method == "vanilla" else 1.5)
    nats = tokens * (result.val_loss + 0.3 * spread * factor)
    nats *= result.val_loss * tokens.sum() / nats.sum()
    record = {**result.record, "val_documents": {"nats": nats.tolist(), "tokens": tokens.tolist()}}
    return CellResult(result.method, result.seed, result.val_loss, record, setting=result.setting)


def width(low, high):
    return math.log(high) - math.log(low)


def scored(by_document: tuple[np.ndarray, ...], kept: np.ndarray) -> list[np.ndarray]:
    """Each table's cells' losses (budgets, seeds) on the documents `kept`, from their losses per document."""
    return [losses[..., kept].mean(axis=-1) for losses in by_document]


def test_with_the_held_out_documents_variance_added_the_interval_holds_95_percent():
    """Planted sweeps scored on one held-out set of 40 documents, drawn once per sweep: each document has a difficulty
    every cell shares and an advantage of the method's own (sd 0.06 nats, so that over 40 documents the set moves the
    method's gain by about as much as the seeds do). The target is the multiplier on the documents' population. The
    seeds alone under-cover; with the variance of the reading redone leaving out each of 10 groups of documents
    (sweep.Sweep.documents_left_out) added, the interval holds. On Wikipedia's 506 held-out documents the committed
    cells' documents move Depth-Attention's gain over vanilla by about 0.001 nats (a grouped jackknife's standard
    error), the seeds by about 0.03: there the documents' share is small."""
    rng, seeds, groups, held = np.random.default_rng(4), 5, 10, {"seeds": [], "with documents": []}
    for _ in range(200):  # about 2 s
        base, method = planted(rng, seeds)
        common, own = 0.3 * rng.standard_normal(40), 0.06 * rng.standard_normal(40)
        by_document = base[..., None] + common, method[..., None] + common + own  # (budgets, seeds, documents)
        every = np.ones(40, dtype=bool)
        b, m = scored(by_document, every)
        k = data_multipliers(X, BaselineCurve.fit(X, b.mean(axis=1)), m)[0][METHOD_BUDGETS]
        loo = resampled_multipliers(X, b, {"m": m}, leave_one_out(seeds))["m"][:, METHOD_BUDGETS]
        documents = []
        for group in range(groups):
            kept = every.copy()
            kept[group::groups] = False
            b_left, m_left = scored(by_document, kept)
            documents.append(data_multipliers(X, BaselineCurve.fit(X, b_left.mean(axis=1)), m_left)[0][METHOD_BUDGETS])
        for name, left in (("seeds", None), ("with documents", np.array(documents))):
            low, high = log_jackknife_t(k, loo, documents=left)
            held[name].append((low <= K) & (high >= K))
    rates = {name: np.mean(rows, axis=0) for name, rows in held.items()}
    # over these 200 sweeps: the seeds alone 0.79 to 0.91, with the documents 0.975 to 0.995 (conservative: the
    # documents' part, from 10 groups, is read with the seeds' t quantile at 4 degrees of freedom)
    assert rates["with documents"].min() >= 0.93 and rates["seeds"].mean() <= 0.90, rates


def test_where_cells_store_their_documents_losses_the_interval_adds_the_documents_variance(tiny_data, tmp_path):
    from depthattn.study import Study
    from depthattn.study.calibrated import jackknife_se
    from depthattn.study.multiplier import multipliers
    from depthattn.study.sweep import DOCUMENT_GROUPS, Sweep
    from tests.study.test_multiplier import BUDGETS, planted_results
    from tests.study.test_study import WSD_BUDGETS, write_study

    study = Study.load(write_study(tmp_path, tiny_data, axes=WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS),
                                   seeds=range(5)))
    plain = planted_results(study, lambda x: 1.2, noise=0.002)
    spread = np.random.default_rng(0).standard_normal(40)  # some documents easier than others for every cell
    documented = [with_documents(r, spread) for r in plain]
    without, within = multipliers(study, plain), multipliers(study, documented)
    assert not without.documents and within.documents
    for bare, both in zip(without.rows[0].points, within.rows[0].points, strict=True):
        assert bare.multiplier == both.multiplier  # the same estimate, a wider interval
        assert both.t_low <= bare.t_low and both.t_high >= bare.t_high
        assert (both.t_high - both.t_low) > 1.05 * (bare.t_high - bare.t_low) or bare.t_low is None
    # gamma's interval, and its p-value (the Holm verdict's), carry the same variance
    bare, both = without.rows[0].trend, within.rows[0].trend
    assert bare.gamma.value == both.gamma.value and both.p > bare.p
    assert both.gamma.t_high - both.gamma.t_low > bare.gamma.t_high - bare.gamma.t_low
    # so does the joint fit's: gamma, the multiplier at 20 tokens per parameter and gamma's p-value
    bare, both = without.fit.methods["depth_attention"], within.fit.methods["depth_attention"]
    assert both.gamma.t_high - both.gamma.t_low > 1.05 * (bare.gamma.t_high - bare.gamma.t_low)
    assert width(both.at_t_low, both.at_t_high) > 1.05 * width(bare.at_t_low, bare.at_t_high)
    assert both.p_holm >= bare.p_holm
    sample = Sweep(study, tuple(documented)).bootstrap
    i = len(sample.labels) // 2
    k, seeds = sample.k["depth_attention"][i], sample.loo["depth_attention"][:, i]
    groups = sample.documents["depth_attention"][:, i]
    assert groups.shape == (DOCUMENT_GROUPS,)
    point = next(p for p in within.rows[0].points if p.label == sample.labels[i])
    se = math.sqrt(jackknife_se(np.log(seeds)) ** 2 + jackknife_se(np.log(groups)) ** 2)
    half = math.log(point.t_high) - math.log(k)
    assert half == pytest.approx(se * 2.776445, rel=1e-4)  # Student's t at 4 degrees of freedom
