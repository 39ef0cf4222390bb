"""Paired differences between methods over seeds: means, t-tests and 95% intervals (scipy)."""

from __future__ import annotations

import math
import statistics

from .records import CellResult
from .spec import Study, setting_label

CONFIDENCE = 0.95
MIN_SEEDS = 5  # below it a seed bootstrap has too few distinct resamples to carry an interval: none is shown


def paired_difference(values: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> dict:
    """method - baseline over paired seeds: mean, sd, two-sided paired t-test and its confidence interval."""
    diffs = [a - b for a, b in zip(values, baseline, strict=True)]
    out = {"n": len(diffs), "diff_mean": statistics.fmean(diffs),
           "diff_std": statistics.stdev(diffs) if len(diffs) > 1 else 0.0, "wins": sum(d < 0 for d in diffs),
           "p_value": math.nan, "diff_low": math.nan, "diff_high": math.nan}
    if len(diffs) > 1 and out["diff_std"] > 0:
        try:
            from scipy.stats import ttest_rel
        except ImportError:
            raise ImportError("the paired test needs scipy: pip install 'depthattn[analysis]'") from None
        test = ttest_rel(values, baseline)
        interval = test.confidence_interval(confidence)
        out.update(p_value=float(test.pvalue), diff_low=float(interval.low), diff_high=float(interval.high))
    return out


def paired_values(results: list[CellResult], a: str, b: str, key: str) -> tuple[list[float], list[float]]:
    by_seed = {m: {r.seed: r.metric(key) for r in results if r.method == m} for m in (a, b)}
    seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
    return [by_seed[a][s] for s in seeds], [by_seed[b][s] for s in seeds]


def summarize(study: Study, results: list[CellResult], key: str = "val_loss") -> dict:
    """Per setting label: rows (one per method with results) and contrasts, differences paired by seed."""
    table = {}
    for setting in study.settings():
        label = setting_label(setting)
        cells = [r for r in results if r.setting == setting]
        rows = []
        for method in study.methods:
            runs = [r for r in cells if r.method == method]
            if not runs:
                continue
            values = [r.metric(key) for r in runs]
            row = {"method": method, "seeds": len(runs), "mean": statistics.fmean(values),
                   "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                   "extra_params": runs[0].params_extra,
                   "tokens_per_s": statistics.fmean(r.tokens_per_s for r in runs)}
            if method != study.baseline:
                pair = paired_values(cells, method, study.baseline, key)
                if pair[0]:
                    row.update(paired_difference(*pair))
            rows.append(row)
        contrasts = []
        for a, b in study.contrasts:
            pair = paired_values(cells, a, b, key)
            if pair[0]:
                contrasts.append({"pair": [a, b], **paired_difference(*pair)})
        table[label] = {"setting": setting, "rows": rows, "contrasts": contrasts}
    return table


def format_interval(row: dict) -> str:
    if "diff_mean" not in row:
        return "—"
    if math.isnan(row["diff_low"]):
        return f"{row['diff_mean']:+.4f} (n={row['n']})"
    return f"{row['diff_mean']:+.4f} [{row['diff_low']:+.4f}, {row['diff_high']:+.4f}]"


def verdict(row: dict) -> str:
    """'better' / 'worse' when the 95% interval excludes zero, else 'no difference shown'."""
    if "diff_low" not in row or math.isnan(row["diff_low"]):
        return "too few seeds"
    if row["diff_high"] < 0:
        return "better"
    if row["diff_low"] > 0:
        return "worse"
    return "no difference shown"
