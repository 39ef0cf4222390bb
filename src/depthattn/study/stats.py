"""Paired differences between methods over seeds (means, t-tests and 95% intervals: scipy) and each setting's summary,
as typed records that the reports read by attribute and the JSON summary writes with `to_dict`."""

from __future__ import annotations

import math
import statistics
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


def paired_difference(values: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> Difference:
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
