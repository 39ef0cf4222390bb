"""A study's figures: paired differences against each axis, along training, and every setting at once."""

from __future__ import annotations

import math
import statistics
import textwrap
from pathlib import Path

from ...evaluate.plots import save_figure
from ..multiplier import EXTRAPOLATION_LIMIT, Multipliers
from ..records import CellResult
from ..spec import Study, setting_label
from ..stats import summarize
from ..trend import GainTrend


def _wrapped(title: str, fig) -> str:
    """A title in lines that fit `fig`'s width at 9 points (about 12 characters an inch): study titles run long."""
    return textwrap.fill(title, int(12 * fig.get_figwidth()))


def plot_differences(study: Study, results: list[CellResult], out_png: Path) -> Path | None:
    """Paired Δ val loss vs the baseline with its 95% interval: against the first axis, or per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summarize(study, results)
    methods = [m for m in study.methods if m != study.baseline]
    axis = study.axes[0] if study.axes else None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    # budgets only the baseline trains have no difference to plot
    labels = [label for label in table if any(study.trains(table[label].setting, m) for m in methods)]
    for i, method in enumerate(methods):
        xs, ys, lows, highs = [], [], [], []
        for j, label in enumerate(labels):
            row = table[label].row(method)
            if row is None or row.difference is None:
                continue
            d = row.difference
            x = j + (i - (len(methods) - 1) / 2) * 0.08 if axis else i
            mean = d.diff_mean
            low, high = (mean, mean) if math.isnan(d.diff_low) else (d.diff_low, d.diff_high)
            xs.append(x)
            ys.append(mean)
            lows.append(mean - low)
            highs.append(high - mean)
        if xs:
            ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-" if axis else "o", capsize=3, color=f"C{i}", label=method)
    ax.axhline(0, color="black", lw=0.8)
    if axis:
        ax.set_xticks(range(len(labels)), [table[label].setting[axis.name] for label in labels])
        ax.set_xlabel(axis.name)
    else:
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_ylabel(f"Δ val loss vs {study.baseline} (nats), 95% CI")
    ax.set_title(_wrapped(study.title, fig), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing to show with the baseline alone
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_curve_differences(study: Study, results: list[CellResult], out_png: Path) -> Path:
    """Paired Δ of the validation curves (eval subset) against training tokens: where the gap goes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = ["-", "--", ":", "-."]
    for s, setting in enumerate(study.settings()):
        cells = [r for r in results if r.setting == setting]
        base = {r.seed: r.curve for r in cells if r.method == study.baseline}
        for i, method in enumerate(m for m in study.methods if m != study.baseline):
            runs = [r for r in cells if r.method == method and r.seed in base]
            if not runs:
                continue
            tokens = list(runs[0].curve)
            diffs = [[v - base[r.seed][t] for t, v in r.curve.items()] for r in runs]
            mean = [statistics.fmean(d) for d in zip(*diffs, strict=True)]
            ax.plot(tokens, mean, styles[s % len(styles)], color=f"C{i}",
                    label=f"{method} {setting_label(setting)} ({len(runs)} seeds)")
            if len(runs) > 1:
                by_token = list(zip(*diffs, strict=True))
                ax.fill_between(tokens, [min(d) for d in by_token], [max(d) for d in by_token],
                                color=f"C{i}", alpha=0.1)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"Δ val loss vs {study.baseline} (nats; eval subset)")
    ax.set_title(_wrapped(f"{study.title}: mean over seeds, shaded min-max", fig), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_overview(entries: list, columns: list[str], out_png: Path, title: str) -> Path:
    """The index's table (`setting_differences`: `report.IndexEntry`s) as one figure, titled `title`: per setting,
    each paired difference of `columns` with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name in columns if any(entry.found[name] for entry in entries)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(entries)), 4.5))
    for i, name in enumerate(names):
        shown = [(j, d) for j, entry in enumerate(entries)
                 if (d := entry.difference(name)) and not math.isnan(d.diff_low)]
        if shown:
            means = [d.diff_mean for _, d in shown]
            errors = [[m - d.diff_low for m, (_, d) in zip(means, shown, strict=True)],
                      [d.diff_high - m for m, (_, d) in zip(means, shown, strict=True)]]
            offset = (i - (len(names) - 1) / 2) * 0.15
            ax.errorbar([j + offset for j, _ in shown], means, yerr=errors, fmt="o", capsize=3, color=f"C{i}",
                        label=name)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(entries)), [f"{e.label}\n({e.study})" for e in entries], fontsize=8)
    ax.set_ylabel("Δ val loss (nats), 95% CI; below 0: the first is better")
    ax.set_title(_wrapped(title, fig), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing to show before two seeds of a setting
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_trend(study: Study, fits: list[GainTrend], out_png: Path) -> Path:
    """Gains against tokens per parameter (log x): per pair the paired means with 95% intervals, the fitted
    log-linear trend and its bootstrap band shaded; one panel per reference method (the baseline, then each
    contrast's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    references = list(dict.fromkeys(fit.against for fit in fits))
    fig, axes = plt.subplots(1, len(references), figsize=(6.5 * len(references), 4.5), squeeze=False)
    colours = {m: f"C{i}" for i, m in enumerate(study.methods)}
    for ax, against in zip(axes[0], references, strict=True):
        for fit in (f for f in fits if f.against == against):
            colour = colours[fit.method]
            xs = [p.tokens_per_parameter for p in fit.points]
            gains = [p.difference for p in fit.points]
            means = [d.diff_mean for d in gains]
            low = [m - (d.diff_low if not math.isnan(d.diff_low) else m) for m, d in zip(means, gains, strict=True)]
            high = [(d.diff_high if not math.isnan(d.diff_high) else m) - m for m, d in zip(means, gains, strict=True)]
            ax.errorbar(xs, means, yerr=[low, high], fmt="o", capsize=3, color=colour,
                        label=f"{fit.method} ({len(fit.seeds)} seeds)")
            band = fit.band
            grid = band.x.tolist() if band else [min(xs), max(xs)]
            line = [fit.intercept + fit.slope_per_decade * math.log10(x) for x in grid]
            ax.plot(grid, line, "-", color=colour, lw=1)
            if band:  # none where the seeds cannot carry one
                ax.fill_between(band.x, band.low, band.high, color=colour, alpha=0.12)
            if fit.zero_at and not fit.zero_from_the_start:
                ax.axvline(fit.zero_at, color=colour, ls=":", lw=1)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xscale("log")
        measured = [p.tokens_per_parameter for fit in fits for p in fit.points]
        ax.set_xlim(min(measured) / 2, min(1e4, max(1000, 20 * max(measured))))
        ax.set_xlabel("training tokens per parameter (log); dotted: fitted band reaches zero")
        ax.set_ylabel(f"Δ val loss vs {against} (nats); below 0: better")
        ax.set_title(f"against {against}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(_wrapped(study.title, fig), fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_multipliers(study: Study, found: Multipliers, out_png: Path) -> Path:
    """Each method's data multiplier over the baseline against tokens per parameter (log-log): points with their
    95% intervals (none below five seeds), open where read beyond the baseline's measured curve, and the line
    k x^gamma of the slope that gives the verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = {m: f"C{i}" for i, m in enumerate(study.methods)}
    pointless = []
    for row in found.rows:
        points = [p for p in row.points if p.printable]
        colour = colours[row.method]
        trend, gamma = row.trend, row.trend.gamma
        # the method's name on its first point, so that it is in the legend also where no line is drawn
        label = row.method + (f" (slope {gamma.value:+.3f}: {gamma.verdict})" if gamma.verdict else "")
        for i, p in enumerate(points):
            k = p.multiplier
            yerr = ([[k - p.low], [p.high - k]]
                    if p.low is not None and p.high is not None and math.isfinite(p.high) else None)
            ax.errorbar(p.tokens_per_parameter, k, yerr=yerr, fmt="o", capsize=3, color=colour,
                        mfc="white" if p.extrapolated else colour, label=label if i == 0 else None)
        if not points:  # every multiplier a bound: the legend still names the method (below)
            pointless.append(row.method)
        xs = [p.tokens_per_parameter for p in points if math.isfinite(p.multiplier)]
        if xs and math.isfinite(gamma.value):
            ax.plot(xs, [math.exp(trend.log_c) * x ** gamma.value for x in xs], "-", color=colour, lw=1)
    ax.axhline(1, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    # the multipliers span a small range: plain ticks such as 1.05x read better than log decades
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("training tokens per parameter (log); open: read beyond the baseline's measured budgets")
    ax.set_ylabel(f"data multiplier over {study.baseline} (log); above 1: better")
    ax.grid(alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()
    for method in pointless:  # a handle of its own: an empty line on the axes would break the log scale
        handles.append(Line2D([], [], ls="", marker="o", color=colours[method], mfc="white"))
        labels.append(f"{method}: none within {EXTRAPOLATION_LIMIT:g} x of the measured budgets")
    ax.legend(handles, labels, fontsize=8)
    ax.set_title(_wrapped(study.title, fig), fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_png)
