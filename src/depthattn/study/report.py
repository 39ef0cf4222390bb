"""A study's pages: per study a Markdown report, JSON summary and plots; one index over all studies."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..files import atomic_write_bytes, atomic_write_json
from ..presets import METHOD_PRESETS
from ..train.config import read_toml
from .multiplier import (
    EXTRAPOLATION_LIMIT,
    MIN_FIT_BUDGETS,
    JointFit,
    MethodMultipliers,
    Multipliers,
    sweep_multipliers,
)
from .picks import search_result
from .pricing import H100_BF16_TFLOPS, cell_flops
from .records import Cell, CellResult
from .render.analyses import format_tuning
from .render.figures import plot_curve_differences, plot_differences, plot_multipliers, plot_overview, plot_trend
from .render.numbers import describe_zero, format_interval, format_multiplier
from .spec import Study, setting_label
from .stats import (
    Contrast,
    Difference,
    MethodSummary,
    SettingSummary,
    paired_difference,
    summarize,
    verdict,
)
from .sweep import REPEATS_FLAG, Sweep
from .sweep import RESAMPLES as MULTIPLIER_RESAMPLES
from .trend import RESAMPLES, GainTrend, paired_by_budget, trend
from .tuning import rate_axis, tuned_multipliers
from .wanted import uncertain_cells


def markdown_report(study: Study, results: list[CellResult], found: dict[str, Multipliers | None] | None = None,
                    trends: dict[str, list[GainTrend | None]] | None = None) -> str:
    """The study's report; `found` and `trends`: its `budget_multipliers` and `budget_trends`, where the caller has
    them already."""
    found = found if found is not None else budget_multipliers(study, results)
    trends = trends if trends is not None else budget_trends(study, results)
    loss, bpb = summarize(study, results, "val_loss"), summarize(study, results, "val_bits_per_byte")
    lines = [f"### {study.title}", "",
             f"`depthattn study {study.config_file}`; val loss = mean next-token loss (nats) over the "
             f"whole held-out split; Δ = method − {study.baseline} paired by seed, with its 95% t-interval; "
             "negative is better.", ""]
    if study.waiting:
        lines += [f"Waiting: {study.waiting}.", ""]
    if study.search:
        lines += [*_search_table(study), ""]
    if study.confirm and not study.waiting:
        lines += [*_confirm_table(study, loss), ""]
    if study.compare:
        lines += [*_compare_table(study, results), ""]
    if study.branch_axis:
        for label, sweep in Sweep(study, tuple(results)).models().items():  # a ladder: per size
            lines += [f"**{label}**, against the budget:", ""] if label else []
            lines += [*_trend_table(sweep, trends[label]), ""]
            multiplier = _multiplier_tables(study, found[label])
            lines += [*multiplier, ""] if multiplier else []
        tuned = tuned_multipliers(study, results) if rate_axis(study) else None
        lines += [*format_tuning(study, tuned), ""] if tuned else []
    for label, table in loss.items():
        if not table.rows:
            continue
        cells = [r for r in results if r.setting == table.setting]
        if label:
            lines += [f"**{label}**", ""]
        lines += [f"Training: {cells[0].train_tokens:,} tokens per run; cell key "
                  f"`{study.cell_path(Cell(table.setting, study.baseline, 0)).parts[0]}`"
                  f"{_last_quarter(study.baseline, cells)}.", "",
                  "| method |" + (" variant |" if study.describe else "") +
                  f" seeds | val loss (mean ± sd) | bits/byte | Δ loss vs {study.baseline} [95% CI] | p "
                  "| seeds better | verdict | extra params |" + (" paper |" if study.paper else ""),
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if study.describe else "")
                  + ("---|" if study.paper else "")]
        for r in table.rows:
            d = r.difference
            p = f"{d.p_value:.3f}" if d and not math.isnan(d.p_value) else "—"
            wins = f"{d.wins}/{d.n}" if d else "—"
            lines.append(
                f"| {r.method} |" + (f" {study.describe.get(r.method, '')} |" if study.describe else "") +
                f" {r.seeds} | {_mean_sd(r)} | "
                f"{bpb[label].row(r.method).mean:.4f} | {format_interval(d)} | {p} | {wins} | "
                f"{verdict(d) if d else '—'} | {r.extra_params:,} |"
                + (f" {study.paper.get(r.method, '—')} |" if study.paper else ""))
        lines += _gpu_throughput(study, table, cells)
        if study.start_from:
            lines += ["", *_curve_table(study, cells)]
        for c in table.contrasts:
            (a, b), d = c.pair, c.difference
            p = "" if math.isnan(d.p_value) else f", p = {d.p_value:.3f}"
            lines += ["", f"{a} − {b}: {format_interval(d)}{p}, {a} lower in {d.wins}/{d.n} "
                          f"seeds: **{verdict(d).replace('better', f'{a} better').replace('worse', f'{b} better')}**."]
        lines.append("")
    return "\n".join(lines) + "\n"


def _gpu_throughput(study: Study, table, cells: list[CellResult]) -> list[str]:
    """For cells trained on a GPU: each method's training tokens per second and its model FLOPs utilisation of
    a 989 TFLOP/s bf16 peak (H100, H200), from the cell's FLOPs per token (`pricing.cell_flops`)."""
    if not any(c.record.get("device") == "cuda" for c in cells):
        return []
    parts = []
    for r in table.rows:
        flops = cell_flops(study, table.setting, r.method)
        mfu = r.tokens_per_s * flops["flops"] / flops["tokens"] / (H100_BF16_TFLOPS * 1e12)
        parts.append(f"{r.method} {r.tokens_per_s:,.0f} ({mfu:.1%})")
    return ["", "Training throughput on the GPU, tokens/s (MFU of 989 TFLOP/s bf16): " + ", ".join(parts) + "."]


def _mean_sd(row) -> str:
    """`mean ± sd`; one seed has no spread to show."""
    return f"{row.mean:.4f} ± {row.std:.4f}" if row.seeds > 1 else f"{row.mean:.4f}"


def _search_table(study: Study) -> list[str]:
    """The pre-registered search: its rule, each candidate's mean over the search seeds, and the picks."""
    search = study.search
    result = search_result(study)
    seeds = ", ".join(map(str, search.seeds))
    lines = [f"Pre-registered search (written in `{study.config_file}` before its cells ran): the "
             f"{search.pick} candidates with the lowest mean {search.metric} over seeds {seeds} go on.", "",
             f"| rank | candidate | seeds | mean {search.metric} ± sd |", "|---|---|---|---|"]
    for rank, row in enumerate(result.ranking, 1):
        lines.append(f"| {rank} | {row.method} | {row.seeds} | {_mean_sd(row)} |")
    if result.picked is None:
        lines += ["", f"Not decided yet: {result.missing} candidate cells to go."]
    else:
        lines += ["", f"Picked: **{'**, **'.join(result.picked)}**."]
    return lines


def _confirm_table(study: Study, tables: dict) -> list[str]:
    """A confirmation: each method's paired difference from `against` in every setting, and the rule's outcome (a
    method better than `against` in every setting becomes a named preset). A method is out once a setting shows
    it worse, or shows no difference with every seed in; it is in once every setting shows it better."""
    against = study.confirm["against"]
    labels = [label for label, table in tables.items() if table.rows]
    methods = [a for a, b in study.contrasts if b == against]
    all_seeds = len(study.seeds) + len(study.more_seeds)
    lines = [f"Against {against}, setting by setting (the rule written in the config: a method better than "
             f"{against} in every setting becomes a named preset):", "",
             f"| method − {against} | " + " | ".join(labels) + " | better in every setting |",
             "|---|" + "---|" * (len(labels) + 1)]
    status, mean_diff = {}, {}
    for method in methods:
        found = [c.difference if (c := tables[label].contrast(method, against)) else None for label in labels]
        verdicts = [verdict(d) if d else "not run" for d in found]
        if verdicts and all(v == "better" for v in verdicts):
            status[method] = "yes"
        elif any(v == "worse" or (v == "no difference shown" and d.n >= all_seeds)
                 for v, d in zip(verdicts, found)):
            status[method] = "no"
        else:
            status[method] = "not decided"
        mean_diff[method] = statistics.fmean([d.diff_mean for d in found if d] or [math.inf])
        lines.append(f"| {method} | " + " | ".join(_cell(c) for c in found) + f" | {status[method]} |")
    winners = [m for m, s in status.items() if s == "yes"]
    if winners:
        outcome = f"**{'**, **'.join(winners)}** better than {against} in every setting: a named preset"
    elif methods and all(s == "no" for s in status.values()):
        closest = min(mean_diff, key=mean_diff.get)
        outcome = (f"no method is better than {against} in every setting; closest: **{closest}** (mean difference "
                   f"over the settings it ran in: {mean_diff[closest]:+.4f})")
    else:
        outcome = f"not decided yet ({', '.join(m for m, s in status.items() if s == 'not decided')} still open)"
    return [*lines, "", f"Outcome: {outcome}."]


def trend_pairs(study: Study) -> list[tuple[str, str]]:
    """The gains a budget study fits: every method against the baseline, then the study's contrasts."""
    return [(m, study.baseline) for m in study.methods if m != study.baseline] + [tuple(c) for c in study.contrasts]


def budget_trends(study: Study, results: list[CellResult]) -> dict[str, list[GainTrend | None]]:
    """A branched study's fitted gains per budget group: for each of its `trend_pairs`, the `trend.trend` fit (None
    where too few budgets or seeds)."""
    found = Sweep(study, tuple(results)).models() if study.branch_axis else {}
    return {label: [trend(study, list(sweep.results), *pair) for pair in trend_pairs(study)]
            for label, sweep in found.items()}


def _trend_table(sweep: Sweep, fits: list[GainTrend | None]) -> list[str]:
    """Each gain at every budget (paired by seed, 95% interval), its fitted log-linear trend (`fits`, one per pair
    of `trend_pairs`) and where the trend's bootstrap band first holds zero. A budget only the baseline trains has
    no gain: its epochs are stated, it gets no column."""
    study, results, x_of = sweep.study, list(sweep.results), sweep.tokens_per_parameter
    if not x_of:
        return []
    axis = study.branch_axis
    labels = sorted(x_of, key=x_of.get)
    epochs = {r.setting[axis.name]: r.data_epochs for r in results}
    paired = [paired_by_budget(study, results, *pair) for pair in trend_pairs(study)]
    columns = [label for label in labels if any(label in pairs for pairs in paired)]
    lines = ["Against the budget (tokens per parameter of the baseline model; all budgets of a seed come from one WSD "
             "run). Epochs over the training data: " + ", ".join(
                 f"{x_of[label]:.2g}: {epochs[label]:.2f}" for label in labels if epochs.get(label) is not None)
             + ".", "",
             "| gain | " + " | ".join(f"{x_of[label]:.2g} tok/param" for label in columns)
             + " | slope per decade [95% CI] | fitted band reaches zero at |",
             "|---|" + "---|" * (len(columns) + 2)]
    for (method, against), fit, pairs in zip(trend_pairs(study), fits, paired, strict=True):
        cells = []
        for label in columns:
            if label in pairs:
                values, base = zip(*pairs[label].values())
                difference = paired_difference(list(values), list(base))
                cells.append(f"{format_interval(difference)} {_short_verdict(difference)}")
            else:
                cells.append("—")
        if fit:
            interval = f" [{fit.slope_low:+.4f}, {fit.slope_high:+.4f}]" if fit.slope_low is not None else ""
            tail = f"{fit.slope_per_decade:+.4f}{interval} | {describe_zero(fit)} |"
        else:
            tail = "— | — |"
        lines.append(f"| {method} − {against} | " + " | ".join(cells) + f" | {tail}")
    return [*lines, "", "Each cell: mean [95% t-interval] (n seeds in brackets where too few), ✓ better, ✗ worse, "
                        "· no difference shown. Fit: gain = a + b log10(tokens per parameter) through the mean "
                        f"gains; band and slope interval from {RESAMPLES:,} bootstrap resamples of the seeds."]


def flops_ratios(study: Study) -> dict[str, float]:
    """Each method's training FLOPs per token over the baseline's (the library's costs; at the first setting)."""
    setting = study.settings()[0]
    base = cell_flops(study, setting, study.baseline)["flops"]
    return {m: cell_flops(study, setting, m)["flops"] / base for m in study.methods}


def budget_multipliers(study: Study, results: list[CellResult]) -> dict[str, Multipliers | None]:
    """A branched study's multipliers (`multiplier.multipliers`, with each method's FLOPs ratio) per budget group."""
    found = Sweep(study, tuple(results)).models() if study.branch_axis else {}
    ratios = flops_ratios(study) if found else None
    return {label: sweep_multipliers(sweep, ratios) for label, sweep in found.items()}


def _multiplier_tables(study: Study, found: Multipliers | None) -> list[str]:
    """Each method's data and compute multiplier over the baseline at every budget, the slope of the multiplier
    with the budget (the verdict) and the joint fit."""
    if found is None:
        return []
    x = dict(zip(found.labels, found.x))
    head = " | ".join(f"{x[label]:.2g} tok/param" for label in found.labels)
    n = len(found.seeds)
    fit = found.fit
    lines = [f"As multipliers: the tokens {study.baseline} needs to reach each method's mean loss, over the "
             f"method's tokens (data multiplier; divided by the method's training FLOPs per token over "
             f"{study.baseline}'s: compute multiplier), from {study.baseline}'s mean loss curve over the budgets "
             "(made non-increasing, interpolated in log tokens per parameter by a monotone cubic), "
             f"{n} seeds: those every method has at every budget within {REPEATS_FLAG:g} epochs (a longer budget "
             "shows a method once it has every one of them; — until then).", "",
             f"| data multiplier | {head} | gamma: slope of log multiplier per log budget [95% CI] | verdict |",
             "|---|" + "---|" * (len(found.labels) + 2)]
    for row in found.rows:
        slope = row.trend.gamma
        gamma = f"{slope.value:+.3f}" + (f" [{slope.low:+.3f}, {slope.high:+.3f}]" if slope.low is not None else "")
        if math.isnan(slope.value):
            gamma = f"— (under two budgets within {REPEATS_FLAG:g} epochs)"
        lines.append(f"| {row.method} | " + " | ".join(_at_each(found, row, format_multiplier))
                     + f" | {gamma} | {slope.verdict or f'too few seeds ({n})'} |")
    lines += _calibrated_table(found, head)
    lines += ["", f"| compute multiplier | FLOPs per token over {study.baseline} | {head} |",
              "|---|---|" + "---|" * len(found.labels)]
    for row in found.rows:
        ratio = row.flops_ratio or 1.0
        lines.append(f"| {row.method} | {ratio:.3f} | "
                     + " | ".join(_at_each(found, row, lambda p: format_multiplier(p, ratio))) + " |")
    epochs = [f"{x[p.label]:.2g}: {p.read_epochs:.2f}" for p in found.rows[0].points
              if p.read_epochs is not None] if found.rows else []
    if fit is None:
        lines += ["", f"No joint fit: it needs {MIN_FIT_BUDGETS} budgets that pass over the data at most "
                      f"{REPEATS_FLAG:g} times (here: {len(found.fit_budgets)})."]
    else:
        lines += _joint_fit_table(found, fit, n) + _which_reading(found, fit)
    return [*lines, "", f"Each multiplier: point [95% interval from {MULTIPLIER_RESAMPLES:,} bootstrap resamples of "
                        f"the seeds; none below five seeds]; † read beyond {study.baseline}'s measured budgets (a "
                        f"power law anchored at the curve's end; not printed past {EXTRAPOLATION_LIMIT:g} x, a bound "
                        f"instead); ‡ reads {study.baseline}'s curve past {REPEATS_FLAG:g} epochs, where repeating "
                        "the data flattens it and inflates the multiplier. Epochs of that curve where the first "
                        "method's multipliers read it: " + (", ".join(epochs) or "not recorded") + ". Verdict: "
                        "gamma's interval above zero: the multiplier grows with the budget; below: fades; across "
                        "zero: holds."]


def _calibrated_table(found: Multipliers, head: str) -> list[str]:
    """The same multipliers and gammas with calibrated intervals (study/calibrated.py), and gamma's verdict with
    Holm's adjustment over the methods: the reading to believe where it differs from the table above."""
    rows = [row for row in found.rows if row.trend.gamma.t_low is not None]
    if not rows:
        return []
    lines = ["", "The same with calibrated intervals: the jackknife t-interval over leave-one-seed-out values "
                 f"(n − 1 = {len(found.seeds) - 1} degrees of freedom, on the log scale for multipliers), which "
                 "holds its 95% coverage at five seeds where the bootstrap percentiles above cover about 85% "
                 "(tests/study/test_calibrated.py); the verdict again, and with Holm's adjustment over the methods "
                 "(p from the same t statistic). Read these where the two disagree."
             + (" The held-out documents' variance is added (every cell stores each document's loss: a jackknife "
                "leaving out one of 10 groups of documents at a time)." if found.documents else
                " They hold the seeds' variance only, not the held-out documents' (these cells predate storing each "
                "document's loss)."), "",
             f"| calibrated | {head} | gamma [calibrated 95% CI] | verdict | p (Holm) | verdict (Holm) |",
             "|---|" + "---|" * (len(found.labels) + 4)]
    for row in rows:
        trend, gamma = row.trend, row.trend.gamma
        lines.append(f"| {row.method} | "
                     + " | ".join(_at_each(found, row, lambda p: format_multiplier(p, calibrated=True)))
                     + f" | {gamma.value:+.3f} [{gamma.t_low:+.3f}, {gamma.t_high:+.3f}] | "
                       f"{gamma.t_verdict} | {trend.p_holm:.3f} | {trend.holm_verdict} |")
    return lines


def _at_each(found: Multipliers, row: MethodMultipliers, write) -> list[str]:
    """`write(point)` of the row's method at each of the table's budgets; "—" where its cells are still to come."""
    at = {p.label: p for p in row.points}
    return [write(at[label]) if label in at else "—" for label in found.labels]


def _joint_fit_table(found: Multipliers, fit: JointFit, n: int) -> list[str]:
    lines = ["", f"Joint fit over {', '.join(found.fit_budgets)} tokens per parameter (the budgets that pass "
                 f"over the data at most {REPEATS_FLAG:g} times): L_m(D) = E + B (k_m D^(1 + gamma_m))^-beta, "
                 f"E = {fit.E:.3f}, B = {fit.B:.3f}, beta = {fit.beta:.3f}, root-mean-square residual "
                 f"{fit.rms_residual:.4f} nats" + _bound_note(fit) + ":", "",
             "| method | k (at 1 tok/param) | gamma [95% CI] | multiplier at 20 tok/param [95% CI] | joint fit says |",
             "|---|---|---|---|---|"]
    for method, row in fit.methods.items():
        gamma = row.gamma
        interval = f" [{gamma.low:+.3f}, {gamma.high:+.3f}]" if gamma.low is not None else ""
        at = f"{row.at:.2f}x" + (f" [{row.at_low:.2f}, {row.at_high:.2f}]" if row.at_low else "")
        if not fit.at_printable:
            at = f"— (past {EXTRAPOLATION_LIMIT:g} x the fitted budgets)"
        lines.append(f"| {method} | {row.k:.3f} | {gamma.value:+.4f}{interval}"
                     f" | {at} | {gamma.verdict or f'too few seeds ({n})'} |")
    return lines


def _which_reading(found: Multipliers, fit: JointFit) -> list[str]:
    """Which of the two readings a verdict rests on, and where the joint fit says otherwise, why; nothing below the
    seeds a calibrated interval needs."""
    primary = {row.method: row.trend.holm_verdict for row in found.rows if row.trend.holm_verdict}
    if not primary:
        return []
    differ = [f"{method} ({primary[method]}; the joint fit: {row.gamma.verdict})" for method, row in fit.methods.items()
              if method in primary and row.gamma.verdict and row.gamma.verdict != primary[method]]
    return ["", "The primary reading is the first: gamma fitted to each budget's multiplier, as the sweep's rule "
            "states it, its verdict read by the calibrated interval with Holm's adjustment (the bootstrap percentiles "
            "under-cover). The joint fit is a check beside it: it reads every method through one loss curve shared "
            "by all (E, B, beta), so its gamma also carries that curve's shape, and its interval is a bootstrap "
            "percentile one. "
            + (f"They differ for {', '.join(differ)}: there the primary reading's verdict stands, and the difference "
               "says that the multiplier is not one power law in the budget over these budgets." if differ else
               "Here they agree.")]


def _bound_note(fit: JointFit) -> str:
    """'; at a bound of the fit: E = 0 (its lower bound), ...' where a parameter sits on one; '' otherwise."""
    if not fit.at_bounds:
        return ""
    return (f"; **at a bound of the fit**: {', '.join(fit.at_bounds)}, so the data do not place it and the other "
            "parameters absorb the difference: read them with care")


def _short_verdict(difference: Difference) -> str:
    return {"better": "✓", "worse": "✗", "no difference shown": "·"}.get(verdict(difference), "")


def _compare_table(study: Study, results: list[CellResult]) -> list[str]:
    """This study against another of the same settings and methods (e.g. WSD branches against cosine runs): each
    method's loss difference, and each gain over the baseline under both, paired by seed."""
    other = study.compare["with"]  # loaded with this study's results
    theirs = other.read_results()
    tolerance = study.compare["tolerance"]
    lines = [f"Against `{other.name}` (the same settings as separate runs; this − that, paired by seed):", "",
             f"| setting | method | val loss, this − {other.name} | Δ vs {study.baseline}, this | "
             f"Δ vs {study.baseline}, {other.name} | intervals overlap |", "|---|---|---|---|---|---|"]
    worst, overlaps = 0.0, []
    for setting in study.settings():
        mine = [r for r in results if r.setting == setting]
        yours = [r for r in theirs if r.setting == setting]
        for method in study.methods:
            a = {r.seed: r.val_loss for r in mine if r.method == method}
            b = {r.seed: r.val_loss for r in yours if r.method == method}
            seeds = sorted(set(a) & set(b))
            if not seeds:
                continue
            shift = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
            worst = max(worst, abs(shift.diff_mean))
            gains = [row.difference if (row := summarize(study, runs)[setting_label(setting)].row(method)) else None
                     for runs in (mine, yours)]
            overlap = "—"
            if all(g and not math.isnan(g.diff_low) for g in gains):
                overlaps.append(gains[0].diff_low <= gains[1].diff_high and gains[1].diff_low <= gains[0].diff_high)
                overlap = "yes" if overlaps[-1] else "no"
            lines.append(f"| {setting_label(setting)} | {method} | {format_interval(shift)} | "
                         + " | ".join(map(format_interval, gains)) + f" | {overlap} |")
    if not overlaps:
        return lines
    same = all(overlaps) and worst <= tolerance
    return [*lines, "", f"Rule (written in the config before the cells ran): reproduces when every gain's intervals "
                        f"overlap and no method's mean loss differs by more than {tolerance} nats. Largest mean "
                        f"difference: {worst:.4f}; intervals overlap in {sum(overlaps)}/{len(overlaps)}: "
                        f"**{'reproduces' if same else 'does not reproduce'}**."]


def _last_quarter(method: str, cells: list[CellResult]) -> str:
    """How far `method`'s eval-subset loss (mean over seeds) still fell over the last quarter of training: how
    flat the curve is where the budget ends."""
    curves = [r.curve for r in cells if r.method == method and r.curve]
    if not curves:
        return ""
    tokens = sorted(set.intersection(*[set(curve) for curve in curves]))
    end = tokens[-1]
    start = min(tokens, key=lambda t: abs(t - 0.75 * end))
    if start == end:
        return ""
    before, after = (statistics.fmean(curve[t] for curve in curves) for t in (start, end))
    return (f"; {method}'s eval-subset loss over the last quarter of training ({start:,} to {end:,} tokens): "
            f"{before:.3f} to {after:.3f} ({after - before:+.3f})")


def _curve_table(study: Study, cells: list[CellResult]) -> list[str]:
    """Eval-subset val loss along training, mean ± sd over seeds: where started models begin (tokens 0) and go."""
    curves = {m: [r.curve for r in cells if r.method == m] for m in study.methods}
    tokens = sorted({t for runs in curves.values() for run in runs for t in run})
    lines = ["Along training (eval-subset val loss, mean ± sd over seeds; tokens 0 = the starting model converted):",
             "",
             "| method | " + " | ".join(f"{t:,} tokens" for t in tokens) + " |", "|---|" + "---|" * len(tokens)]
    for method, runs in curves.items():
        values = [[run[t] for run in runs if t in run] for t in tokens]
        lines.append(f"| {method} | " + " | ".join(
            f"{statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}" if len(v) > 1 else (f"{v[0]:.4f}" if v else "—")
            for v in values) + " |")
    return lines


@dataclass(frozen=True)
class Report:
    """A study's written report: its page and the page's Markdown without the figures, as the index shows it."""

    path: Path
    markdown: str


def write_report(study: Study) -> Path:
    """results/<name>.md, .json and plots from the committed cell results (no training)."""
    return report_study(study).path


def report_study(study: Study) -> Report:
    """`write_report`, returning the report with its Markdown for `write_index`."""
    results = study.read_results()
    root = Path(study.results)
    found, trends = budget_multipliers(study, results), budget_trends(study, results)
    markdown = text = markdown_report(study, results, found, trends)
    if results:
        text += f"\n![Δ vs {study.baseline}]({study.name}_difference.png)\n"
        text += f"\n![Δ along training]({study.name}_curves.png)\n"
        plot_differences(study, results, root / f"{study.name}_difference.png")
        plot_curve_differences(study, results, root / f"{study.name}_curves.png")
        for label, fits in trends.items():
            name = f"{study.name}_{label}" if label else study.name
            if fits := [fit for fit in fits if fit]:
                plot_trend(study, fits, root / f"{name}_trend.png")
                text += f"\n![gains against the budget{', ' + label if label else ''}]({name}_trend.png)\n"
            if found[label]:
                plot_multipliers(study, found[label], root / f"{name}_multiplier.png")
                text += f"\n![multipliers against the budget{', ' + label if label else ''}]({name}_multiplier.png)\n"
    atomic_write_bytes(root / f"{study.name}.md", text.encode())
    summary = {label: table.to_dict() for label, table in summarize(study, results).items()}
    atomic_write_json(root / f"{study.name}.json", {"study": study.name, "title": study.title, "summary": summary})
    return Report(root / f"{study.name}.md", markdown)


def _cell(difference: Difference | None) -> str:
    return f"{format_interval(difference)}: {verdict(difference)}" if difference else "—"


def _cell_paths(studies: list[Study], seeds_of) -> set[Path]:
    return {study.result_path(cell) for study in studies for cell in study.cells(seeds_of(study))}


def _progress(studies: list[Study]) -> str:
    first = _cell_paths(studies, lambda study: study.seeds)
    more = _cell_paths(studies, lambda study: study.more_seeds) - first  # a cell may be another study's first seed
    wanted = {study.result_path(cell) for study in studies
              for cell in uncertain_cells(study)} - first
    line = (f"Finished: {sum(p.exists() for p in first)} of the {len(first)} distinct cells of {len(studies)} "
            f"studies at their first seeds")
    if more:
        line += (f"; more seeds where an interval spanned zero: {sum(p.exists() for p in more)} finished, "
                 f"{len(wanted)} still wanted")
    return line + "."


INDEX_CONFIG = Path(__file__).with_name("index.toml")  # the index page's title and columns


@dataclass(frozen=True)
class IndexColumn:
    """A column of the index: the paired difference `method` − `against`, headed `label`."""

    label: str
    method: str
    against: str

    def find(self, study: Study, table: SettingSummary) -> MethodSummary | Contrast | None:
        """This difference in one setting of `study`: against the study's baseline the method's row, else the
        study's contrast (method, against); None where the study has neither."""
        if self.against == study.baseline:
            return table.row(self.method)
        return table.contrast(self.method, self.against)


@dataclass(frozen=True)
class IndexPage:
    """The index page's description (study/index.toml): its title, the heading of its table and the title of its
    figure, the method whose results make a setting a row (`anchor`), and the table's columns."""

    title: str
    heading: str
    figure_title: str
    anchor: str
    columns: tuple[IndexColumn, ...]

    @classmethod
    def load(cls, path: str | Path = INDEX_CONFIG) -> IndexPage:
        data = read_toml(path, "index config", str(INDEX_CONFIG))
        table = data.get("index")
        if set(data) != {"index"} or not isinstance(table, dict):
            raise ValueError(f"{path}: an index config has one table, [index]; got {sorted(data)}")
        fields = {"title", "heading", "figure_title", "anchor", "columns"}
        if set(table) != fields:
            raise ValueError(f"{path}: [index] takes {', '.join(sorted(fields))}; got {sorted(table)}")
        columns = []
        for column in table["columns"]:
            if not isinstance(column, dict) or set(column) != {"label", "method", "against"}:
                raise ValueError(f"{path}: each [[index.columns]] takes label, method and against; got {column}")
            columns.append(IndexColumn(**column))
        labels = [column.label for column in columns]
        if not columns or len(set(labels)) != len(labels):
            raise ValueError(f"{path}: the index needs columns, each with a label of its own; got {labels}")
        unknown = {table["anchor"], *(m for c in columns for m in (c.method, c.against))} - set(METHOD_PRESETS)
        if unknown:
            raise ValueError(f"{path}: {sorted(unknown)} are not method presets; choose from "
                             f"{', '.join(METHOD_PRESETS)}")
        return cls(table["title"], table["heading"], table["figure_title"], table["anchor"], tuple(columns))

    @property
    def labels(self) -> list[str]:
        return [column.label for column in self.columns]


@dataclass(frozen=True)
class IndexEntry:
    """A row of the index: a distinct setting, named by its label and the first study to hold it with the anchor's
    results, its train tokens, the anchor's seeds and, per column label, what the first study that has it found
    (`IndexColumn.find`; None where none has)."""

    label: str
    study: str
    train_tokens: int
    seeds: int
    found: dict[str, MethodSummary | Contrast | None]

    def difference(self, column: str) -> Difference | None:
        """The column's paired difference (None where no study has it, or its row has no difference)."""
        found = self.found[column]
        return found.difference if found else None


def setting_differences(studies: list[Study], index: IndexPage | None = None) -> list[IndexEntry]:
    """Per distinct setting where the index's anchor method has results: its `IndexEntry`, each column filled from
    the first study that has it once the setting has its row."""
    index = index or IndexPage.load()
    entries = {}
    for study in studies:
        results = study.read_results()
        for label, table in summarize(study, results).items():
            key = study.cell_path(Cell(table.setting, study.baseline, 0)).parts[0]
            entry = entries.get(key)
            if entry is None:
                anchor = table.row(index.anchor)
                if anchor is None:
                    continue
                entry = entries[key] = IndexEntry(
                    label or "base", study.name, next(r.train_tokens for r in results if r.setting == table.setting),
                    anchor.seeds, dict.fromkeys(index.labels))
            for column in index.columns:
                entry.found[column.label] = entry.found[column.label] or column.find(study, table)
    return list(entries.values())


def write_index(studies: list[Study], path: Path, index: IndexPage | None = None,
                reports: Mapping[str, Report] | None = None) -> Path:
    """One page for the whole study: every distinct setting's key differences (the columns of `index`, by default
    study/index.toml's), then each study's report (from `reports`, by study name, where `report_study` wrote it
    already)."""
    reports = reports or {}
    index = index or IndexPage.load()
    lines = [f"# {index.title}", "",
             "Generated by `make study` (`depthattn study configs/study/*.toml --index docs/results/study.md`) from "
             "the "
             "committed cell results in `docs/results/study/cells/`; do not edit by hand. Each cell trains one method "
             "with one seed; cells of the same setting and seed share the data order and the backbone's initial "
             "weights, so differences are paired by seed. Val loss: nats per token on the whole held-out split "
             "of the embedded corpus. Δ: the paired difference with its 95% t-interval; "
             "'better' / 'worse' only where that interval excludes zero.", "",
             _progress(studies), "",
             f"## {index.heading}", "",
             f"| setting | study | train tokens | seeds | {' | '.join(index.labels)} |",
             "|---" * (4 + len(index.columns)) + "|"]
    entries = setting_differences(studies, index)
    for entry in entries:
        lines.append(f"| {entry.label} | {entry.study} | {entry.train_tokens:,} | {entry.seeds} | "
                     + " | ".join(_cell(entry.difference(label)) for label in index.labels) + " |")
    figure = plot_overview(entries, index.labels, Path(studies[0].results) / "overview.png", index.figure_title)
    lines += ["", f"![every setting]({Path(studies[0].results).name}/{figure.name})"]
    for study in studies:
        report = reports.get(study.name)
        markdown = report.markdown if report else markdown_report(study, study.read_results())
        text = markdown.replace("](", f"]({Path(study.results).name}/")
        lines += ["", text]
        why = Path(study.results) / f"{study.name}_why.json"
        if why.exists():
            for label in json.loads(why.read_text())["settings"]:
                lines += [f"![why: {label}]({Path(study.results).name}/{study.name}_why_{label}.png)", ""]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    return path
