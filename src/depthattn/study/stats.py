"""Paired differences between methods over seeds (means, t-tests and 95% intervals: scipy) and each setting's summary,
as typed records that the reports read by attribute and the JSON summary writes with `to_dict`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .records import CellResult
from .spec import Study, setting_label

CONFIDENCE = 0.95
MIN_SEEDS = 5  # below it a seed bootstrap has too few distinct resamples to carry an interval: none is shown


@dataclass(frozen=True)
class Difference:
    """method − baseline over paired seeds: n seeds, the mean and sd of the differences, the seeds where the method
    is lower, and (from two seeds that differ) the two-sided paired t-test's p-value and confidence interval."""

    n: int
    diff_mean: float
    diff_std: float
    wins: int
    p_value: float = math.nan
    diff_low: float = math.nan
    diff_high: float = math.nan

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MethodSummary:
    """One method in one setting: its seeds, the mean and sd of the metric, and its difference from the baseline
    (None for the baseline itself and where the two share no seed)."""

    method: str
    seeds: int
    mean: float
    std: float
    extra_params: int
    tokens_per_s: float
    difference: Difference | None = None

    def to_dict(self) -> dict:
        return {"method": self.method, "seeds": self.seeds, "mean": self.mean, "std": self.std,
                "extra_params": self.extra_params, "tokens_per_s": self.tokens_per_s,
                **(self.difference.to_dict() if self.difference else {})}


@dataclass(frozen=True)
class Contrast:
    """A contrast of the study, `pair[0]` − `pair[1]`, in one setting."""

    pair: tuple[str, str]
    difference: Difference

    def to_dict(self) -> dict:
        return {"pair": list(self.pair), **self.difference.to_dict()}


@dataclass(frozen=True)
class SettingSummary:
    """A setting's summary: a row per method with results (in the study's order) and the contrasts with seeds in
    common."""

    setting: dict[str, str]
    rows: tuple[MethodSummary, ...]
    contrasts: tuple[Contrast, ...]

    def row(self, method: str) -> MethodSummary | None:
        return next((row for row in self.rows if row.method == method), None)

    def contrast(self, method: str, against: str) -> Contrast | None:
        return next((c for c in self.contrasts if c.pair == (method, against)), None)

    def to_dict(self) -> dict:
        """As the report's JSON holds it."""
        return {"setting": dict(self.setting), "rows": [row.to_dict() for row in self.rows],
                "contrasts": [c.to_dict() for c in self.contrasts]}


def paired_difference(values: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE
                      ) -> Difference:
    """method - baseline over paired seeds: mean, sd, two-sided paired t-test and its confidence interval."""
    diffs = [a - b for a, b in zip(values, baseline, strict=True)]
    n, mean = len(diffs), statistics.fmean(diffs)
    std, wins = statistics.stdev(diffs) if n > 1 else 0.0, sum(d < 0 for d in diffs)
    if n < 2 or std <= 0:
        return Difference(n, mean, std, wins)
    try:
        from scipy.stats import ttest_rel
    except ImportError:
        raise ImportError("the paired test needs scipy: pip install 'depthattn[analysis]'") from None
    test = ttest_rel(values, baseline)
    interval = test.confidence_interval(confidence)
    return Difference(n, mean, std, wins, float(test.pvalue), float(interval.low), float(interval.high))


def paired_values(results: list[CellResult], a: str, b: str, key: str) -> tuple[list[float], list[float]]:
    by_seed = {m: {r.seed: r.metric(key) for r in results if r.method == m} for m in (a, b)}
    seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
    return [by_seed[a][s] for s in seeds], [by_seed[b][s] for s in seeds]


def summarize(study: Study, results: list[CellResult], key: str = "val_loss") -> dict[str, SettingSummary]:
    """Per setting label: rows (one per method with results) and contrasts, differences paired by seed."""
    table = {}
    for setting in study.settings():
        cells = [r for r in results if r.setting == setting]
        rows = []
        for method in study.methods:
            runs = [r for r in cells if r.method == method]
            if not runs:
                continue
            values = [r.metric(key) for r in runs]
            pair = paired_values(cells, method, study.baseline, key) if method != study.baseline else ([], [])
            rows.append(MethodSummary(method, len(runs), statistics.fmean(values),
                                      statistics.stdev(values) if len(values) > 1 else 0.0, runs[0].params_extra,
                                      statistics.fmean(r.tokens_per_s for r in runs),
                                      paired_difference(*pair) if pair[0] else None))
        contrasts = [Contrast((a, b), paired_difference(*pair)) for a, b in study.contrasts
                     if (pair := paired_values(cells, a, b, key))[0]]
        table[setting_label(setting)] = SettingSummary(setting, tuple(rows), tuple(contrasts))
    return table


def verdict(difference: Difference | None) -> str:
    """'better' / 'worse' when the 95% interval excludes zero, else 'no difference shown'."""
    if difference is None or math.isnan(difference.diff_low):
        return "too few seeds"
    if difference.diff_high < 0:
        return "better"
    if difference.diff_low > 0:
        return "worse"
    return "no difference shown"


@dataclass(frozen=True)
class LastQuarter:
    """How far `method`'s eval-subset loss (mean over seeds) fell from about three quarters of training (`start`
    tokens) to its end: how flat the curve is where the budget ends."""

    method: str
    start: int
    end: int
    before: float
    after: float


def last_quarter(method: str, cells: list[CellResult]) -> LastQuarter | None:
    """`LastQuarter` of `method` over the tokens every one of its curves in `cells` has; None without curves or
    with a single point."""
    curves = [r.curve for r in cells if r.method == method and r.curve]
    if not curves:
        return None
    tokens = sorted(set.intersection(*[set(curve) for curve in curves]))
    end = tokens[-1]
    start = min(tokens, key=lambda t: abs(t - 0.75 * end))
    if start == end:
        return None
    before, after = (statistics.fmean(curve[t] for curve in curves) for t in (start, end))
    return LastQuarter(method, start, end, before, after)


@dataclass(frozen=True)
class Spread:
    """The mean and sd of some values (sd None for a single value)."""

    mean: float
    std: float | None


@dataclass(frozen=True)
class CurveSummary:
    """Eval-subset val loss along training: per method, its `Spread` over seeds at each of `tokens` (None where no
    seed has that point)."""

    tokens: tuple[int, ...]
    methods: dict[str, tuple[Spread | None, ...]]


def curve_summary(methods: list[str], cells: list[CellResult]) -> CurveSummary:
    curves = {m: [r.curve for r in cells if r.method == m] for m in methods}
    tokens = tuple(sorted({t for runs in curves.values() for run in runs for t in run}))

    def spread(values: list[float]) -> Spread | None:
        if len(values) > 1:
            return Spread(statistics.mean(values), statistics.stdev(values))
        return Spread(values[0], None) if values else None

    return CurveSummary(tokens, {method: tuple(spread([run[t] for run in runs if t in run]) for t in tokens)
                                 for method, runs in curves.items()})


@dataclass(frozen=True)
class ComparedMethod:
    """One method in one setting of two studies: its loss shift (this − that, paired by seed), its gain over the
    baseline in each study, and whether those two gains' intervals overlap (None without both intervals)."""

    setting: str
    method: str
    shift: Difference
    gains: tuple[Difference | None, Difference | None]
    overlap: bool | None


@dataclass(frozen=True)
class Comparison:
    """A study against another of the same settings and methods (`other`, its name), with the rule's tolerance:
    reproduces when every gain's intervals overlap and no mean loss shifts by more than the tolerance."""

    other: str
    tolerance: float
    rows: tuple[ComparedMethod, ...]

    @property
    def worst(self) -> float:
        """The largest absolute mean loss shift."""
        return max([0.0, *(abs(row.shift.diff_mean) for row in self.rows)])

    @property
    def overlaps(self) -> list[bool]:
        return [row.overlap for row in self.rows if row.overlap is not None]

    @property
    def reproduces(self) -> bool:
        return all(self.overlaps) and self.worst <= self.tolerance


def compare_studies(study: Study, results: list[CellResult], other: str, theirs: list[CellResult],
                    tolerance: float) -> Comparison:
    """`study`'s `results` against `theirs`, another study's of the same settings (`other` names it), setting by
    setting and method by method."""
    gains = [summarize(study, runs) for runs in (results, theirs)]
    rows = []
    for setting in study.settings():
        label = setting_label(setting)
        for method in study.methods:
            a, b = ({r.seed: r.val_loss for r in runs if r.setting == setting and r.method == method}
                    for runs in (results, theirs))
            seeds = sorted(set(a) & set(b))
            if not seeds:
                continue
            shift = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
            here, there = (row.difference if (row := table[label].row(method)) else None for table in gains)
            overlap = None
            if here and there and not math.isnan(here.diff_low) and not math.isnan(there.diff_low):
                overlap = here.diff_low <= there.diff_high and there.diff_low <= here.diff_high
            rows.append(ComparedMethod(label, method, shift, (here, there), overlap))
    return Comparison(other, tolerance, tuple(rows))
