"""The analyses' pages from their records: the depth axis, the orderings on two or more corpora, a prediction's score,
the tuned reading of a learning-rate sweep and the results table across sweeps (the headline)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..calibrated import t_quantile
from ..multiplier import EXTRAPOLATION_LIMIT
from ..spec import Study
from ..stats import MIN_SEEDS
from ..sweep import DOCUMENT_GROUPS, REPEATS_FLAG
from ..tuning import TunedPoint, Tuning
from .numbers import bracket, format_multiplier

if TYPE_CHECKING:  # the analyses' records; analyses/ imports this module to register their pages
    from ..analyses.depth_axis import DepthAxis, DepthTrend, InteractionSurface
    from ..analyses.headline import Headline, HeadlineFound
    from ..analyses.orderings import Orderings, OrderingsFound, Swap
    from ..analyses.predictions import Score


def _interaction_lines(found: InteractionSurface) -> list[str]:
    """The surface with a budget x depth term, as the analysis config's rule states it."""
    a, gamma, delta, eta = found.coefficients
    if math.isnan(eta):
        return []
    at = "; ".join(f"{x:g}: {slope.value:+.3f}{bracket(slope.t_low, slope.t_high)}"
                   + (f" **{slope.t_verdict}**" if slope.t_verdict else "") for x, slope in found.delta_at.items())
    eta_text = f"eta {eta:+.3f}{bracket(found.eta.t_low, found.eta.t_high)}"
    if found.eta.t_verdict:
        eta_text += f" (calibrated): the gain from depth **{found.eta.t_verdict}** with the budget"
    return [f"With a budget x depth term (the primary surface since 2026-12-05): log k = {a:+.3f} {gamma:+.3f} "
            f"log x {delta:+.3f} log L {eta:+.3f} log x log L; {eta_text}. Slope in depth, delta + eta log x "
            f"[calibrated], at tokens per parameter {at}.", ""]


def format_depth_axis(axis: DepthAxis, trend: DepthTrend) -> str:
    """The depth axis as Markdown: per method, the multiplier at each depth and budget, delta with its interval and
    verdict, then the surface."""
    lines = [f"# {axis.title}", "", f"Config: `{axis.config_file}`; sweeps: "
             + ", ".join(f"`{s.config_file}`" for s in axis.sweeps) + ".", ""]
    if trend.missing:
        lines += ["Waiting for cells (three budgets and one seed that every method has at each, at least; "
                  "`depthattn study` on a sweep runs what it lacks):", ""]
        lines += [f"- `{sweep}`: {gaps}" for sweep, gaps in trend.missing.items()]
        return "\n".join(lines) + "\n"
    depths = trend.depths or []  # set once nothing is missing
    seeds = ", ".join(f"{n} at {d} layers" for n, d in zip(trend.seeds or [], depths, strict=True))
    baseline = axis.sweeps[0].baseline
    lines += [f"Data multiplier over {baseline} at each depth (seeds: {seeds}), as each sweep's own report states "
              f"it: † read on {baseline}'s fitted curve beyond that sweep's measured budgets (more than "
              f"{EXTRAPOLATION_LIMIT:g}x beyond: a bound instead), ‡ read on it past {REPEATS_FLAG:g} epochs; "
              "delta: the slope of log multiplier against log depth, with its 95% seed-bootstrap interval (none below "
              f"{MIN_SEEDS} seeds in every sweep).", ""]
    if len(set(trend.seeds or [])) > 1:
        lines += ["No calibrated interval: the sweeps' seed counts differ, and the grouped jackknife leaves one seed "
                  "position out of every sweep at once, so it needs as many seeds in each (run the missing ones).", ""]
    for method, entry in trend.methods.items():
        s = entry.surface.delta
        calibrated = s.t_low is not None
        lines += [f"## {method}", "", "| tokens per parameter | " + " | ".join(f"{d} layers" for d in depths)
                  + " | delta [95%] | with depth |" + (" delta [calibrated 95%] | with depth |" if calibrated else ""),
                  "|---" * (len(depths) + 3 + 2 * calibrated) + "|"]
        for row in entry.budgets:
            cells = [format_multiplier(point) for point in row.points]
            d = row.delta
            lines.append(f"| {row.label} | " + " | ".join(cells) + f" | {d.value:+.3f}"
                         f"{bracket(d.low, d.high)} | {d.verdict or '—'} |"
                         + (f" {d.value:+.3f}{bracket(d.t_low, d.t_high)} | {d.t_verdict} |" if calibrated else ""))
        a, gamma, delta = entry.surface.coefficients
        lines += ["", f"Surface over the budgets read within {REPEATS_FLAG:g} epochs: log k = {a:+.3f} "
                  f"{gamma:+.3f} log x {delta:+.3f} log L; delta{bracket(s.low, s.high)}: "
                  f"**{s.verdict or 'no verdict (too few seeds)'}** with depth"
                  + (f"; calibrated{bracket(s.t_low, s.t_high)}: **{s.t_verdict}**" if calibrated else "")
                  + ".", ""]
        lines += _interaction_lines(entry.interaction)
    if any(entry.surface.delta.t_low is not None for entry in trend.methods.values()):
        lines += ["Calibrated: the jackknife t-interval (study/calibrated.py), each leave-one-out fit leaving one seed "
                  "position out of every sweep at once (a seed's runs at each depth share its data order); the "
                  "bootstrap percentiles beside it under-cover at five seeds. Read these where the two disagree. "
                  + (f"The held-out documents' variance is added (each of {DOCUMENT_GROUPS} groups of documents left "
                     "out of every sweep's cells in turn)." if trend.documents else "They hold the seeds' variance "
                     "only: not every sweep's cells store each held-out document's loss."), ""]
    lines.append(f"A prediction read more than {EXTRAPOLATION_LIMIT:g}x past the measured depths ({depths[0]} to "
                 f"{depths[-1]} layers) is marked as an extrapolation.")
    return "\n".join(lines) + "\n"


def _separation(value: bool | None) -> str:
    return "no resamples" if value is None else "separated" if value else "within noise"


def _listed(items: list[str]) -> str:
    """'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _swap(swap: Swap) -> str:
    (a, b), (s1, s2), (t1, t2) = swap.pair, swap.separated, swap.separated_calibrated
    return (f"{a} / {b} ({_separation(s1)}, {_separation(s2)}; calibrated: {_separation(t1)}, "
            f"{_separation(t2)})")


def format_orderings(orderings: Orderings, found: OrderingsFound) -> str:
    """The orders of every budget in a table, a column per compared sweep; with more than two sweeps, every pair of
    them named where it disagrees, and each method's rank per corpus."""
    names = [f"`{s.config_file}`" for s in orderings.sweeps]
    lines = [f"# {orderings.title}", "", f"Config: `{orderings.config_file}`; sweeps: {_listed(names)}.", ""]
    if found.missing:
        lines += ["Waiting for cells (every method at three budgets, with one seed that every method has at each, "
                  "at least; `depthattn study` on a sweep runs what it lacks)"
                  + (":" if not found.compared else "; the others are compared without them meanwhile:"), ""]
        lines += [f"- `{sweep}`: {gaps}" for sweep, gaps in found.missing.items()]
        if not found.compared:
            return "\n".join(lines) + "\n"
        lines.append("")
    many = len(orderings.sweeps) > 2
    short = {s.config_file: s.name for s in orderings.sweeps}
    compared = [short[c] for c in found.compared]
    planned = {s.config_file: len(s.seeds + s.more_seeds) for s in orderings.sweeps}
    seeds = _listed([f"{n} of {planned[c]}" if n < planned[c] else str(n)
                     for n, c in zip(found.seeds or [], found.compared, strict=True)])
    order_of = "for the pair's first sweep, then its second" if many else "for the first sweep, then the second"
    lines += [f"Methods by data multiplier over the baseline, highest first (seeds: {seeds}); a swapped pair is "
              "separated in a sweep when the 95% seed-bootstrap interval of its multipliers' ratio excludes 1, said "
              f"{order_of} (no resamples below {MIN_SEEDS} seeds), then the same with the calibrated interval (the "
              "jackknife t over leave-one-seed-out values, study/calibrated.py), which holds its coverage where the "
              "bootstrap's percentiles do not: read it where the two disagree.", "",
              "| tokens per parameter | " + " | ".join(f"`{c}`" for c in found.compared)
              + " | same order | pairs that swap |",
              "|---" * (len(found.compared) + 3) + "|"]
    for row in found.budgets:
        orders = [" > ".join(f"{m} {k[m]:.2f}x" for m in order) + ("‡" if row.repeats(i) else "")
                  for i, (order, k) in enumerate(zip(row.orders, row.k, strict=True))]
        if many:
            same = "yes" if row.same else "no: " + "; ".join(
                f"{compared[i]} / {compared[j]}" for (i, j) in (p.sweeps for p in row.pairs if not p.same))
            swaps = "; ".join(f"{compared[p.sweeps[0]]} / {compared[p.sweeps[1]]}: " + ", ".join(map(_swap, p.swaps))
                              for p in row.pairs if p.swaps) or "—"
        else:
            same, swaps = "yes" if row.same else "no", "; ".join(map(_swap, row.swaps)) or "—"
        lines.append(f"| {row.label} | " + " | ".join(orders) + f" | {same} | {swaps} |")
    if any(row.repeats(i) for row in found.budgets for i in range(len(found.compared))):
        stricter = [f"`{compared[i]}`: {flag:g}" for i, flag in enumerate(found.budgets[0].flag_epochs)
                    if flag != REPEATS_FLAG]
        lines += ["", f"‡ the sweep's multipliers read the baseline's curve past {REPEATS_FLAG:g} epochs"
                  + (f" (past the fewer its rule flags from: {', '.join(stricter)})" if stricter else "")
                  + ", where repeating the data flattens it and inflates them: an order there is not a finding."]
    if found.left_out:
        lines += ["", "Compared over the methods every sweep has; left out: "
                  + "; ".join(f"{m} (only in {where})" for m, where in found.left_out.items()) + "."]
    if many and found.budgets:
        lines += ["", "Each method's rank by its multiplier (1: the highest) in each corpus, at "
                  + _listed([row.label for row in found.budgets]) + " tokens per parameter:", "",
                  f"| method | {' | '.join(compared)} |", "|---" * (len(compared) + 1) + "|"]
        for method in found.budgets[0].k[0]:
            ranks = [row.rank(method) for row in found.budgets]
            lines.append(f"| {method} | " + " | ".join(", ".join(str(rank[i]) for rank in ranks)
                                                        for i in range(len(compared))) + " |")
    return "\n".join(lines) + "\n"


def format_score(prediction: dict, rows: list[Score], why: str = "") -> str:
    lines = [f"prediction of {prediction['date']} from {prediction['source']} for {prediction['target']}:",
             "| method | setting | budget | predicted [95%] | measured [95%] | verdict |", "|---|---|---|---|---|---|"]
    for row in rows:
        p = row.predicted
        lines.append(f"| {row.method} | {row.group or '—'} | {row.budget} | {p['multiplier']:.2f}x "
                     f"[{p['low']:.2f}, {p['high']:.2f}] | {format_multiplier(row.measured, calibrated=True)} | "
                     f"{row.verdict} |")
    if not rows:
        lines.append(f"(no finished cell of the target measures a predicted budget: {why})" if why else
                     "(no finished cells of the target measure a predicted budget yet)")
    return "\n".join(lines)


def format_tuned_point(point: TunedPoint, flag_epochs: float = REPEATS_FLAG) -> str:
    """'1.18x [1.10, 1.27]† @4e-3ᵉ': a method's multiplier at its best (or the reference) rate, its interval, † read
    beyond the envelope's measured budgets (too far beyond: a bound instead), ‡ read on it past `flag_epochs` (the
    study's), the rate (ᵉ: at the grid's edge); '—' at a budget the method does not train."""
    if not point.rate or math.isnan(point.multiplier):
        return "—"
    rate = f" @{point.rate}" + ("ᵉ" if point.at_edge else "")
    if not math.isfinite(point.multiplier):
        return "—" + rate
    x = point.read_at / point.multiplier
    if not point.printable:  # the limit of the envelope that may be read
        bound = point.curve_high * EXTRAPOLATION_LIMIT if point.read_at > x else point.curve_low / EXTRAPOLATION_LIMIT
        return f"{'>' if point.read_at > x else '<'} {bound / x:.2f}x†" + rate
    text = f"{point.multiplier:.2f}x"
    if point.low is not None and math.isfinite(point.low):
        text += f" [{point.low:.2f}, {point.high:.2f}]"
    repeats = point.read_epochs is not None and point.read_epochs > flag_epochs
    return text + ("†" if point.extrapolated else "") + ("‡" if repeats else "") + rate


def format_tuning(study: Study, tuning: Tuning) -> list[str]:
    """The tuned reading as Markdown lines."""
    n = len(tuning.seeds)
    flag = study.flag_epochs
    head = " | ".join(f"{label} tok/param" for label in tuning.labels)
    best_rates = ", ".join(f"{label}: {rate}" for label, rate in zip(tuning.labels, tuning.baseline_rates, strict=True))
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    alone = tuning.baseline_alone
    read = (f"Only {study.baseline} is tuned: every other method trained at {tuning.reference} and is read there"
            if alone else f"Each method at its own best rate (@rate), then at {tuning.reference}")
    bias = (f"{study.baseline}'s best rate is chosen on the held-out data that scores it, which biases its envelope "
            "low: the comparison is conservative for the methods." if alone else
            "Each best rate, the baseline's and each method's, is chosen on the held-out data that scores it, which "
            "biases both losses low: the side whose rates tie more closely gains, so the comparison leans neither "
            "way by design.")
    lines = [f"**Tuned**: multipliers against {study.baseline}'s envelope, its best rate at every budget "
             f"({best_rates}), over the rates {', '.join(tuning.rates)}; {seeds} every rate has. {read}; intervals "
             f"calibrated (jackknife t, n − 1 = {n - 1} "
             f"degrees of freedom, the rate choices redone with each seed left out; none below {MIN_SEEDS} seeds, "
             f"t quantile {t_quantile(max(n, 2)):.2f}; "
             + (f"the held-out documents' variance added, the reading redone with each of {DOCUMENT_GROUPS} groups "
                "of documents left out" if tuning.documents else f"the seeds' variance only: {tuning.documents_note}")
             + f"); ᵉ: the best rate is at the grid's edge, so the optimum may lie outside it. {bias} †: read "
             f"beyond the envelope's measured budgets (more than {EXTRAPOLATION_LIMIT:g}x beyond: a bound instead); "
             f"‡: read on it past {flag:g} epochs."
             " gamma: the slope of the best-rate multiplier per log budget [calibrated 95% CI], read after the "
             "cells ran (the rule fixed no slope), so it carries no verdict.",
             "", f"| method, rate | {head} | gamma [95% CI] | verdict at {tuning.verdict_at} (Holm p) |",
             "|---|" + "---|" * (len(tuning.labels) + 2)]
    def row(points: list[TunedPoint]) -> str:
        return " | ".join(format_tuned_point(point, flag) for point in points)

    for m in tuning.methods:
        verdict = f"{m.verdict} ({m.p_holm:.3f})" if m.verdict else "— (too few seeds or budgets)"
        gamma = "—" if math.isnan(m.gamma.value) else f"{m.gamma.value:+.3f}{bracket(m.gamma.t_low, m.gamma.t_high)}"
        if len(m.rates) == 1:  # its best rate is its only one
            lines.append(f"| {m.method}, {m.rates[0]} (its only rate) | " + row(m.best)
                         + f" | {gamma} | {verdict} |")
            continue
        lines.append(f"| {m.method}, best | " + row(m.best)
                     + f" | {gamma} | {verdict} |")
        lines.append(f"| {m.method}, {tuning.reference} | " + row(m.reference)
                     + " | | |")
    return lines


HEADLINE_MARKS = {"ahead": "✓", "behind": "✗", "not shown": "·"}


def format_headline(headline: Headline, found: HeadlineFound) -> str:
    """The results table: a row per method, a column per sweep, each cell its multiplier, calibrated interval and
    verdict mark; then each column's sweep and what it still lacks."""
    def cell(found_cell, interim: bool, flag: float) -> str:
        if found_cell is None:
            return "—"
        point = found_cell.point
        text = (format_tuned_point(point, flag) if isinstance(point, TunedPoint) else
                format_multiplier(point, calibrated=True, flag_epochs=flag))
        return text + (f" {HEADLINE_MARKS[found_cell.verdict]}" if found_cell.verdict and not interim else "")

    columns = found.columns
    head = " | ".join(f"{c.label}, {c.budget} tok/param" for c in columns)
    lines = [f"### {headline.title}", "", f"`depthattn study --analysis {headline.config_file}`", "",
             f"| headline | {head} |", "|---|" + "---|" * len(columns)]
    planned = [len(study.seeds + study.more_seeds) for study in headline.sweeps]
    flags = " or ".join(f"{flag:g}" for flag in sorted({study.flag_epochs for study in headline.sweeps})) + " epochs"
    for method in found.methods:
        lines.append(f"| {method} | " + " | ".join(
            cell(c.cells.get(method), c.seeds < n, study.flag_epochs)
            for c, n, study in zip(columns, planned, headline.sweeps, strict=True)) + " |")
    lines.append("| seeds | " + " | ".join(
        "—" if not c.cells else f"{c.seeds} of {n}" if c.seeds < n else str(c.seeds)
        for c, n in zip(columns, planned, strict=True)) + " |")
    lines += ["", "Each cell: the data multiplier over the baseline (the tokens it needs to reach the method's loss, "
              "over the method's), [its calibrated 95% interval: the jackknife t over leave-one-seed-out values, "
              "unadjusted], ✓ ahead / ✗ behind / · not shown by that interval's test with Holm's adjustment over "
              f"the column's methods (none below {MIN_SEEDS} seeds), so an interval that excludes 1 can still read "
              "·; no mark while a column has fewer seeds than its rule fixed (a look before the end is not a "
              "verdict); @rate: a tuned column's method at its own best learning rate (its one rate where the column "
              "tunes the baseline alone) against the baseline's best-rate envelope (ᵉ: at the grid's edge); † read "
              f"beyond the baseline's measured budgets; ‡ read past the column's study's flag ({flags}); — none: "
              "the column's study has no such method, or its cells are not in yet (below: what each column lacks).", ""]
    for column, study in zip(columns, headline.sweeps, strict=True):
        note = f"- {column.label}: `{study.config_file}`" + (", tuned" if column.tuned else "")
        if column.baseline_alone:
            note += (f" ({study.baseline} alone: its best rate is picked on the data that scores it, each method "
                     "keeps its one rate, so the column is conservative for the methods)")
        if column.diverged:
            note += f" ({column.diverged} cells diverged: no loss; the study's page lists them)"
        if column.missing:
            note += f": {column.missing}"
        elif column.seeds < MIN_SEEDS:
            note += f": no intervals yet ({column.seeds} seeds, fewer than the {MIN_SEEDS} an interval needs)"
        else:
            note += (": intervals over the seeds and the held-out documents" if column.documents else
                     f": intervals over the seeds only ({column.documents_note})")
            if column.read_epochs is not None:
                note += f"; {study.baseline}'s curve read at up to {column.read_epochs:.2f} epochs"
        lines.append(note)
    if found.table_verdicts:
        by_column = {column.label: column for column in columns}
        changed = [f"{method} in {label}: {HEADLINE_MARKS[by_column[label].cells[method].verdict or 'not shown']} → "
                   f"{HEADLINE_MARKS[verdict]}" for (label, method), verdict in found.table_verdicts.items()
                   if verdict != by_column[label].cells[method].verdict]
        lines += ["", f"With Holm's adjustment over all {len(found.table_verdicts)} tests of the table's complete "
                  "columns instead of each column's (the family a reader of the whole table may want): "
                  + ("every mark stands." if not changed else "; ".join(changed) + "; every other mark stands.")]
    return "\n".join(lines) + "\n"
