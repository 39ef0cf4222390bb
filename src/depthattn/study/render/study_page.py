"""A study's page and the index over every study, as Markdown, from their records (study/report.py computes them)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..multiplier import EXTRAPOLATION_LIMIT, MIN_FIT_BUDGETS, JointFit, MethodMultipliers, Multipliers
from ..picks import Confirmation, SearchResult
from ..stats import Comparison, CurveSummary, Difference, LastQuarter, Spread, verdict
from ..sweep import REPEATS_FLAG
from ..sweep import RESAMPLES as MULTIPLIER_RESAMPLES
from ..trend import RESAMPLES, GainTable
from .analyses import format_tuning
from .numbers import describe_zero, format_interval, format_multiplier

if TYPE_CHECKING:
    from ..report import IndexPage, IndexSection, Progress, SettingPage, StudyPage
    from ..spec import Study


def format_study_page(page: StudyPage) -> str:
    """The study's report: what it measured, then each part its record holds, then a table per setting."""
    study = page.study
    lines = [f"### {study.title}", "",
             f"`depthattn study {study.config_file}`; val loss = mean next-token loss (nats) over the "
             f"whole held-out split; Δ = method − {study.baseline} paired by seed, with its 95% t-interval; "
             "negative is better.", ""]
    if study.waiting:
        lines += [f"Waiting: {study.waiting}.", ""]
    if not page.to_run and page.seeds_complete < len(study.seeds):
        lines += [f"**Interim**: {page.seeds_complete} of the {len(study.seeds)} seeds the study fixed have every "
                  "cell; the intervals and verdicts below are a look before the end, not the study's verdict.", ""]
    if page.diverged:
        lines += [f"**Diverged**: {len(page.diverged)} cells stopped before their loss; they count as run, no table "
                  "below averages them, and a learning-rate sweep's tuning ranks them below every run that finished: "
                  + "; ".join(f"{c.cell.label} ({c.record['diverged']})" for c in page.diverged) + ".", ""]
    if page.to_run:
        lines += [f"None of its {page.to_run} cells has finished yet (`depthattn study {study.config_file} "
                  "--status` lists them).", ""]
    if page.search:
        lines += [*_search_table(study, page.search), ""]
    if page.confirmation:
        lines += [*_confirm_table(page.confirmation), ""]
    if page.comparison:
        lines += [*_compare_table(study, page.comparison), ""]
    for group in page.budgets:
        multiplier = _multiplier_tables(study, group.multipliers)
        if group.gains is None and not multiplier:  # the baseline alone trains there
            continue
        lines += [f"**{group.label}**, against the budget:", ""] if group.label else []
        lines += [*_trend_table(group.gains), ""]
        lines += [*multiplier, ""] if multiplier else []
    lines += [*format_tuning(study, page.tuned), ""] if page.tuned else []
    for setting in page.settings:
        lines += _setting_table(study, setting)
    return "\n".join(lines) + "\n"


def format_figures(figures: list[tuple[str, str]]) -> str:
    """The figures below a study's page, each (what it shows, its file)."""
    return "".join(f"\n![{alt}]({file})\n" for alt, file in figures)


def _setting_table(study: Study, setting: SettingPage) -> list[str]:
    lines = [f"**{setting.label}**", ""] if setting.label else []
    lines += [f"Training: {setting.train_tokens:,} tokens per run; cell key `{setting.cell_key}`"
              f"{_last_quarter(setting.last_quarter)}.", "",
              "| method |" + (" variant |" if study.describe else "") +
              f" seeds | val loss (mean ± sd) | bits/byte | Δ loss vs {study.baseline} [95% CI] | p "
              "| seeds better | verdict | extra params |" + (" paper |" if study.paper else ""),
              "|---|---|---|---|---|---|---|---|---|" + ("---|" if study.describe else "")
              + ("---|" if study.paper else "")]
    for r in setting.loss.rows:
        d = r.difference
        p = f"{d.p_value:.3f}" if d and not math.isnan(d.p_value) else "—"
        wins = f"{d.wins}/{d.n}" if d else "—"
        lines.append(
            f"| {r.method} |" + (f" {study.describe.get(r.method, '')} |" if study.describe else "") +
            f" {r.seeds} | {_mean_sd(r)} | "
            f"{setting.bits_per_byte.row(r.method).mean:.4f} | "  # type: ignore[union-attr]  # same methods as loss's
            f"{format_interval(d)} | {p} | {wins} | "
            f"{verdict(d) if d else '—'} | {r.extra_params:,} |"
            + (f" {study.paper.get(r.method, '—')} |" if study.paper else ""))
    if setting.throughput:
        lines += ["", "Training throughput on the GPU, tokens/s (MFU of 989 TFLOP/s bf16): " + ", ".join(
            f"{method} {tokens_per_s:,.0f} ({mfu:.1%})" for method, tokens_per_s, mfu in setting.throughput) + "."]
    if setting.curve:
        lines += ["", *_curve_table(setting.curve)]
    for c in setting.loss.contrasts:
        (a, b), d = c.pair, c.difference
        p = "" if math.isnan(d.p_value) else f", p = {d.p_value:.3f}"
        lines += ["", f"{a} − {b}: {format_interval(d)}{p}, {a} lower in {d.wins}/{d.n} "
                      f"seeds: **{verdict(d).replace('better', f'{a} better').replace('worse', f'{b} better')}**."]
    return [*lines, ""]


def _mean_sd(row) -> str:
    """`mean ± sd`; one seed has no spread to show."""
    return f"{row.mean:.4f} ± {row.std:.4f}" if row.seeds > 1 else f"{row.mean:.4f}"


def _search_table(study: Study, result: SearchResult) -> list[str]:
    """The pre-registered search: its rule, each candidate's mean over the search seeds, and the picks."""
    search = study.search_rule
    seeds = ", ".join(map(str, search.seeds))
    lines = [f"Pre-registered search (written in `{study.config_file}` before its cells ran): the "
             f"{search.pick} candidates with the lowest mean {search.metric} over seeds {seeds} go on.", "",
             f"| rank | candidate | seeds | mean {search.metric} ± sd |", "|---|---|---|---|"]
    for rank, row in enumerate(result.ranking, 1):
        diverged = f" ({row.diverged} diverged: ranked last)" if row.diverged else ""
        lines.append(f"| {rank} | {row.method} | {row.seeds} | {_mean_sd(row) if row.seeds else '—'}{diverged} |")
    if result.picked is None:
        lines += ["", f"Not decided yet: {result.missing} candidate cells to go."]
    else:
        lines += ["", f"Picked: **{'**, **'.join(result.picked)}**."]
    return lines


def _confirm_table(found: Confirmation) -> list[str]:
    """Each method's paired difference from `against` in every setting, and the rule's outcome (a method better than
    `against` in every setting becomes a named preset)."""
    against = found.against
    lines = [f"Against {against}, setting by setting (the rule written in the config: a method better than "
             f"{against} in every setting becomes a named preset):", "",
             f"| method − {against} | " + " | ".join(found.labels) + " | better in every setting |",
             "|---|" + "---|" * (len(found.labels) + 1)]
    for method in found.methods:
        lines.append(f"| {method.method} | " + " | ".join(_cell(d) for d in method.differences)
                     + f" | {method.status} |")
    if found.winners:
        outcome = f"**{'**, **'.join(found.winners)}** better than {against} in every setting: a named preset"
    elif found.methods and all(m.status == "no" for m in found.methods):
        closest = found.closest
        outcome = (f"no method is better than {against} in every setting; closest: **{closest.method}** (mean "
                   f"difference over the settings it ran in: {closest.mean_difference:+.4f})")
    else:
        outcome = (f"not decided yet ({', '.join(m.method for m in found.methods if m.status == 'not decided')} "
                   "still open)")
    return [*lines, "", f"Outcome: {outcome}."]


def _trend_table(table: GainTable | None) -> list[str]:
    """Each gain at every budget (paired by seed, 95% interval), its fitted log-linear trend and where the trend's
    bootstrap band first holds zero. A budget only the baseline trains has no gain: its epochs are stated, it gets
    no column."""
    if table is None:
        return []
    x = table.x
    lines = ["Against the budget (tokens per parameter of the baseline model; all budgets of a seed come from one WSD "
             "run). Epochs over the training data: " + ", ".join(
                 f"{x[label]:.2g}: {epochs:.2f}" for label, epochs in table.epochs.items()) + ".", "",
             "| gain | " + " | ".join(f"{x[label]:.2g} tok/param" for label in table.columns)
             + " | slope per decade [95% CI] | fitted band reaches zero at |",
             "|---|" + "---|" * (len(table.columns) + 2)]
    for row in table.rows:
        cells = [f"{format_interval(d)} {_short_verdict(d)}" if d else "—" for d in row.gains]
        fit = row.fit
        if fit:
            interval = f" [{fit.slope_low:+.4f}, {fit.slope_high:+.4f}]" if fit.slope_low is not None else ""
            tail = f"{fit.slope_per_decade:+.4f}{interval} | {describe_zero(fit)} |"
        else:
            tail = "— | — |"
        lines.append(f"| {row.method} − {row.against} | " + " | ".join(cells) + f" | {tail}")
    return [*lines, "", "Each cell: mean [95% t-interval] (n seeds in brackets where too few), ✓ better, ✗ worse, "
                        "· no difference shown. Fit: gain = a + b log10(tokens per parameter) through the mean "
                        f"gains; band and slope interval from {RESAMPLES:,} bootstrap resamples of the seeds."]


def _multiplier_tables(study: Study, found: Multipliers | None) -> list[str]:
    """Each method's data and compute multiplier over the baseline at every budget, the slope of the multiplier
    with the budget (the verdict) and the joint fit."""
    if found is None:
        return []
    x = dict(zip(found.labels, found.x, strict=True))
    head = " | ".join(f"{x[label]:.2g} tok/param" for label in found.labels)
    n = len(found.seeds)
    fit = found.fit
    flag = study.flag_epochs

    def show(point, ratio: float = 1.0, calibrated: bool = False) -> str:
        return format_multiplier(point, ratio, calibrated, flag)

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
        lines.append(f"| {row.method} | " + " | ".join(_at_each(found, row, show))
                     + f" | {gamma} | {slope.verdict or f'too few seeds ({n})'} |")
    lines += _calibrated_table(found, head, flag)
    lines += ["", f"| compute multiplier | FLOPs per token over {study.baseline} | {head} |",
              "|---|---|" + "---|" * len(found.labels)]
    for row in found.rows:
        ratio = row.flops_ratio or 1.0
        lines.append(f"| {row.method} | {ratio:.3f} | "
                     + " | ".join(_at_each(found, row, lambda p, ratio=ratio: show(p, ratio))) + " |")
    epochs = [f"{x[p.label]:.2g}: {p.read_epochs:.2f}" for p in found.rows[0].points
              if p.read_epochs is not None] if found.rows else []
    if fit is None:
        lines += ["", f"No joint fit: it needs {MIN_FIT_BUDGETS} budgets that pass over the data at most "
                      f"{REPEATS_FLAG:g} times (here: {len(found.fit_budgets)})."]
    else:
        lines += _joint_fit_table(found, fit, n) + which_reading(found, fit)
    return [*lines, "", f"Each multiplier: point [95% interval from {MULTIPLIER_RESAMPLES:,} bootstrap resamples of "
                        f"the seeds; none below five seeds]; † read beyond {study.baseline}'s measured budgets (a "
                        f"power law anchored at the curve's end; not printed past {EXTRAPOLATION_LIMIT:g} x, a bound "
                        f"instead); ‡ reads {study.baseline}'s curve past {flag:g} epochs, where repeating "
                        "the data flattens it and inflates the multiplier"
                        + (f" (the study's rule flags from {flag:g}; gamma still fits the budgets trained within "
                           f"{REPEATS_FLAG:g})" if flag != REPEATS_FLAG else "")
                        + ". Epochs of that curve where the first method's multipliers read it: "
                        + (", ".join(epochs) or "not recorded") + ". Verdict: gamma's interval above zero: "
                        "the multiplier grows with the budget; below: fades; across zero: holds."]


def _calibrated_table(found: Multipliers, head: str, flag_epochs: float) -> list[str]:
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
                f" They hold the seeds' variance only, not the held-out documents' ({found.documents_note})."), "",
             f"| calibrated | {head} | gamma [calibrated 95% CI] | verdict | p (Holm) | verdict (Holm) |",
             "|---|" + "---|" * (len(found.labels) + 4)]
    for row in rows:
        trend, gamma = row.trend, row.trend.gamma
        lines.append(f"| {row.method} | "
                     + " | ".join(_at_each(found, row, lambda p: format_multiplier(p, calibrated=True,
                                                                                    flag_epochs=flag_epochs)))
                     + f" | {gamma.value:+.3f} [{gamma.t_low:+.3f}, {gamma.t_high:+.3f}] | "
                       f"{gamma.t_verdict} | {trend.p_holm:.3f} | {trend.holm_verdict} |")
    return lines + _within_reading_lines(found, rows)


def _within_reading_lines(found: Multipliers, rows: list[MethodMultipliers]) -> list[str]:
    """The sensitivity of each gamma to the budgets whose reading of the baseline's curve passes REPEATS_FLAG
    epochs (‡), which the rule's fit keeps: gamma refitted without them, where a method has any."""
    within = [(row, trend) for row in rows if (trend := row.trend_within_reading) is not None
              and trend.gamma.t_low is not None]
    if not within:
        return []
    parts = []
    for row, trend in within:
        gamma = trend.gamma
        parts.append(f"{row.method} {gamma.value:+.3f} [{gamma.t_low:+.3f}, {gamma.t_high:+.3f}], Holm p "
                     f"{trend.p_holm:.3f}: **{trend.holm_verdict}** (the rule's reading: {row.trend.holm_verdict})")
    return ["", f"Sensitivity, read after the cells ran (not the rule): the rule fits gamma over the budgets the "
                f"methods train within {REPEATS_FLAG:g} epochs, which keeps a multiplier whose reading of "
                f"{found.baseline}'s curve passes them (‡). Without those budgets, calibrated, Holm over the methods "
                "refitted: " + "; ".join(parts) + ". Where the two verdicts differ, the verdict rests on the "
                "flagged budgets."]


def _at_each(found: Multipliers, row: MethodMultipliers, write) -> list[str]:
    """`write(point)` of the row's method at each of the table's budgets; "—" where its cells are still to come."""
    at = {p.label: p for p in row.points}
    return [write(at[label]) if label in at else "—" for label in found.labels]


def _joint_fit_table(found: Multipliers, fit: JointFit, n: int) -> list[str]:
    lines = ["", f"Joint fit over {', '.join(found.fit_budgets)} tokens per parameter (the budgets that pass "
                 f"over the data at most {REPEATS_FLAG:g} times): L_m(D) = E + B (k_m D^(1 + gamma_m))^-beta, "
                 f"E = {fit.E:.3f}, B = {fit.B:.3f}, beta = {fit.beta:.3f}, root-mean-square residual "
                 f"{fit.rms_residual:.4f} nats" + _bound_note(fit) + ":", "",
             "| method | k (at 1 tok/param) | gamma [95% CI] | gamma [calibrated 95% CI] | multiplier at 20 tok/param "
             "[95% CI] | multiplier at 20 tok/param [calibrated 95% CI] | p (Holm) | joint fit says (Holm) |",
             "|---|---|---|---|---|---|---|---|"]
    for method, row in fit.methods.items():
        gamma = row.gamma
        interval = f" [{gamma.low:+.3f}, {gamma.high:+.3f}]" if gamma.low is not None else ""
        calibrated = f" [{gamma.t_low:+.3f}, {gamma.t_high:+.3f}]" if gamma.t_low is not None else ""
        at = f"{row.at:.2f}x" + (f" [{row.at_low:.2f}, {row.at_high:.2f}]" if row.at_low else "")
        at_calibrated = f"{row.at:.2f}x" + (f" [{row.at_t_low:.2f}, {row.at_t_high:.2f}]" if row.at_t_low else "")
        if not fit.at_printable:
            at = at_calibrated = f"— (past {EXTRAPOLATION_LIMIT:g} x the fitted budgets)"
        p = "—" if math.isnan(row.p_holm) else f"{row.p_holm:.3f}"
        lines.append(f"| {method} | {row.k:.3f} | {gamma.value:+.4f}{interval} | {gamma.value:+.4f}{calibrated}"
                     f" | {at} | {at_calibrated} | {p} | {row.holm_verdict or f'too few seeds ({n})'} |")
    return lines


def which_reading(found: Multipliers, fit: JointFit) -> list[str]:
    """Which of the two readings a verdict rests on, and where the joint fit says otherwise, why; nothing below the
    seeds a calibrated interval needs."""
    primary = {row.method: row.trend.holm_verdict for row in found.rows if row.trend.holm_verdict}
    if not primary:
        return []
    differ = [f"{method} ({primary[method]}; the joint fit: {row.holm_verdict})" for method, row in fit.methods.items()
              if method in primary and row.holm_verdict and row.holm_verdict != primary[method]]
    return ["", "The primary reading is the first: gamma fitted to each budget's multiplier, as the sweep's rule "
            "states it, its verdict read by the calibrated interval with Holm's adjustment (the bootstrap percentiles "
            "under-cover). The joint fit is a check beside it: it reads every method through one loss curve shared "
            "by all (E, B, beta), so its gamma also carries that curve's shape; its verdict is read the same way "
            "(the fit redone with each seed left out, Holm over the methods). "
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


def _compare_table(study: Study, found: Comparison) -> list[str]:
    """This study against another of the same settings and methods (e.g. WSD branches against cosine runs): each
    method's loss difference, and each gain over the baseline under both, paired by seed."""
    other = found.other
    lines = [f"Against `{other}` (the same settings as separate runs; this − that, paired by seed):", "",
             f"| setting | method | val loss, this − {other} | Δ vs {study.baseline}, this | "
             f"Δ vs {study.baseline}, {other} | intervals overlap |", "|---|---|---|---|---|---|"]
    for row in found.rows:
        overlap = "—" if row.overlap is None else "yes" if row.overlap else "no"
        lines.append(f"| {row.setting} | {row.method} | {format_interval(row.shift)} | "
                     + " | ".join(map(format_interval, row.gains)) + f" | {overlap} |")
    overlaps = found.overlaps
    if not overlaps:
        return lines
    return [*lines, "", f"Rule (written in the config before the cells ran): reproduces when every gain's intervals "
                        f"overlap and no method's mean loss differs by more than {found.tolerance} nats. Largest mean "
                        f"difference: {found.worst:.4f}; intervals overlap in {sum(overlaps)}/{len(overlaps)}: "
                        f"**{'reproduces' if found.reproduces else 'does not reproduce'}**."]


def _last_quarter(found: LastQuarter | None) -> str:
    if found is None:
        return ""
    return (f"; {found.method}'s eval-subset loss over the last quarter of training ({found.start:,} to "
            f"{found.end:,} tokens): {found.before:.3f} to {found.after:.3f} ({found.after - found.before:+.3f})")


def _curve_table(curve: CurveSummary) -> list[str]:
    """Eval-subset val loss along training, mean ± sd over seeds: where started models begin (tokens 0) and go."""
    def spread(value: Spread | None) -> str:
        if value is None:
            return "—"
        return f"{value.mean:.4f} ± {value.std:.4f}" if value.std is not None else f"{value.mean:.4f}"

    lines = ["Along training (eval-subset val loss, mean ± sd over seeds; tokens 0 = the starting model converted):",
             "",
             "| method | " + " | ".join(f"{t:,} tokens" for t in curve.tokens) + " |",
             "|---|" + "---|" * len(curve.tokens)]
    for method, values in curve.methods.items():
        lines.append(f"| {method} | " + " | ".join(map(spread, values)) + " |")
    return lines


def _cell(difference: Difference | None) -> str:
    return f"{format_interval(difference)}: {verdict(difference)}" if difference else "—"


def _progress(progress: Progress) -> str:
    line = (f"Finished: {progress.first_finished} of the {progress.first} distinct cells of {progress.studies} "
            f"studies at their first seeds")
    if progress.more:
        line += (f"; more seeds where an interval spanned zero (the studies with `more_seeds`, a rule that stops "
                 f"on the data; newer studies fix their seed count): {progress.more_finished} finished, "
                 f"{progress.wanted} still wanted")
    return line + "."


def format_index(index: IndexPage, progress: Progress, entries: list, figure: str,
                 sections: list[IndexSection]) -> str:
    """One page for the whole study: every distinct setting's key differences (the columns of `index`; `entries`,
    `report.IndexEntry`s), the figure of them at `figure`, then each study's report."""
    lines = [f"# {index.title}", "",
             "Generated by `make study` (`depthattn study configs/study/*.toml --index docs/results/study.md`) from "
             "the "
             "committed cell results in `docs/results/study/cells/`; do not edit by hand. Each cell trains one method "
             "with one seed; cells of the same setting and seed share the data order and the backbone's initial "
             "weights, so differences are paired by seed. Val loss: nats per token on the whole held-out split "
             "of the embedded corpus. Δ: the paired difference with its 95% t-interval; "
             "'better' / 'worse' only where that interval excludes zero.", "",
             _progress(progress), "",
             f"## {index.heading}", "",
             f"| setting | study | train tokens | seeds | {' | '.join(index.labels)} |",
             "|---" * (4 + len(index.columns)) + "|"]
    for entry in entries:
        lines.append(f"| {entry.label} | {entry.study} | {entry.train_tokens:,} | {entry.seeds} | "
                     + " | ".join(_cell(entry.difference(label)) for label in index.labels) + " |")
    lines += ["", f"![every setting]({figure})"]
    for section in sections:
        lines += ["", section.markdown.replace("](", f"]({section.folder}/")]
        for label in section.why:
            lines += [f"![why: {label}]({section.folder}/{section.name}_why_{label}.png)", ""]
    return "\n".join(lines) + "\n"
