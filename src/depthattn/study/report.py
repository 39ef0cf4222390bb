"""A study's pages: per study the record its page reads (computed once, handed to the index), the page's Markdown
(study/render/study_page.py writes it), JSON summary and plots; one index over all studies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..files import atomic_write_bytes, atomic_write_json
from ..presets import METHOD_PRESETS
from ..train.config import read_toml
from .multiplier import Multipliers, sweep_multipliers
from .picks import Confirmation, SearchResult, confirmation, search_result
from .pricing import cell_flops, model_flops_utilisation
from .records import Cell, CellResult
from .render.figures import plot_curve_differences, plot_differences, plot_multipliers, plot_overview, plot_trend
from .render.study_page import format_figures, format_index, format_study_page
from .spec import Study
from .stats import (
    Comparison,
    Contrast,
    CurveSummary,
    Difference,
    LastQuarter,
    MethodSummary,
    SettingSummary,
    compare_studies,
    curve_summary,
    last_quarter,
    summarize,
)
from .store import CellStore
from .sweep import Sweep
from .trend import GainTable, GainTrend, budget_trends, gain_table
from .tuning import Tuning, rate_axis, tuned_multipliers
from .wanted import uncertain_cells


@dataclass(frozen=True)
class SettingPage:
    """A setting's table on a study's page: its loss and bits-per-byte summaries, its cells' train tokens and key,
    how far the baseline's curve still fell over the last quarter, each method's GPU throughput and MFU (where its
    cells ran on a GPU) and, for a retrofitting study, the loss along training."""

    label: str
    loss: SettingSummary
    bits_per_byte: SettingSummary
    train_tokens: int
    cell_key: str
    last_quarter: LastQuarter | None
    throughput: tuple[tuple[str, float, float], ...]  # (method, tokens/s, MFU)
    curve: CurveSummary | None


@dataclass(frozen=True)
class BudgetGroup:
    """A branched study's budget group (a ladder's model size; "" for one model): its gains against the budget, the
    fitted trends of `trend.trend_pairs` and the multipliers."""

    label: str
    gains: GainTable | None
    trends: tuple[GainTrend | None, ...]
    multipliers: Multipliers | None


@dataclass(frozen=True)
class StudyPage:
    """What a study's page shows, computed from its results: the search and its picks, a confirmation's outcome, the
    comparison with another study, the budget groups, the tuned reading of a learning-rate sweep and a table per
    setting with results."""

    study: Study
    search: SearchResult | None
    confirmation: Confirmation | None
    comparison: Comparison | None
    budgets: tuple[BudgetGroup, ...]
    tuned: Tuning | None
    settings: tuple[SettingPage, ...]
    to_run: int  # where no cell has finished yet, how many cells the study has (else 0): the page says so
    seeds_complete: int  # how many of its fixed seeds have every cell: below len(study.seeds), the page is interim
    diverged: tuple[CellResult, ...] = ()  # cells whose run diverged (no loss; `CellStore.read_diverged`)


def study_page(study: Study, store: CellStore, results: list[CellResult] | None = None,
               found: dict[str, Multipliers | None] | None = None,
               trends: dict[str, list[GainTrend | None]] | None = None) -> StudyPage:
    """The record of `study`'s page from its cells in `store` (`results`, where the caller has read them already; a
    search and a study it compares with are read there too); `found` and `trends`: its `budget_multipliers` and
    `budget_trends`, where the caller has them already."""
    results = results if results is not None else store.read_results(study)
    diverged = store.read_diverged(study)
    found = found if found is not None else budget_multipliers(study, results)
    trends = trends if trends is not None else budget_trends(study, results)
    loss, bpb = summarize(study, results, "val_loss"), summarize(study, results, "val_bits_per_byte")
    comparison = None
    if study.compare:
        other = study.compare["with"]  # loaded with this study's results
        comparison = compare_studies(study, results, other.name, store.read_results(other),
                                     study.compare["tolerance"])
    budgets = tuple(BudgetGroup(label, gain_table(sweep, trends[label]), tuple(trends[label]), found[label])
                    for label, sweep in Sweep(study, tuple(results)).models().items()) if study.branch_axis else ()
    settings = []
    for label, table in loss.items():
        if not table.rows:
            continue
        cells = [r for r in results if r.setting == table.setting]
        on_gpu = any(c.record.get("device") == "cuda" for c in cells)
        throughput = tuple((r.method, r.tokens_per_s,
                            model_flops_utilisation(study, table.setting, r.method, r.tokens_per_s))
                           for r in table.rows) if on_gpu else ()
        settings.append(SettingPage(
            label, table, bpb[label], cells[0].train_tokens,
            study.cell_path(Cell(table.setting, study.baseline, 0)).parts[0], last_quarter(study.baseline, cells),
            throughput, curve_summary(study.methods, cells) if study.start_from else None))
    return StudyPage(study, search_result(study, store) if study.search else None,
                     confirmation(study, loss) if study.confirm and not study.waiting else None, comparison, budgets,
                     tuned_multipliers(study, results + diverged) if study.branch_axis and rate_axis(study) else None,
                     tuple(settings), 0 if results or diverged else len(study.cells()),
                     seeds_complete(study, results + diverged), tuple(diverged))


def seeds_complete(study: Study, results: list[CellResult]) -> int:
    """How many of `study`'s seeds (not its more_seeds) have a result (or a diverged run) for every cell they
    train."""
    have = {Cell(r.setting, r.method, r.seed) for r in results}
    return sum(all(cell in have for cell in study.cells([seed])) for seed in study.seeds)


def markdown_report(study: Study, store: CellStore, results: list[CellResult] | None = None,
                    found: dict[str, Multipliers | None] | None = None,
                    trends: dict[str, list[GainTrend | None]] | None = None) -> str:
    """The study's report as Markdown (`study_page`, written by `render.study_page`)."""
    return format_study_page(study_page(study, store, results, found, trends))


def flops_ratios(study: Study, setting: Mapping[str, str]) -> dict[str, float]:
    """Each method's training FLOPs per token over the baseline's in `setting` (the library's costs)."""
    base = cell_flops(study, setting, study.baseline)["flops"]
    return {m: cell_flops(study, setting, m)["flops"] / base for m in study.methods}


def budget_multipliers(study: Study, results: list[CellResult]) -> dict[str, Multipliers | None]:
    """A branched study's multipliers (`multiplier.multipliers`, with each method's FLOPs ratio in that model's
    setting: a ladder's sizes differ) per budget group."""
    found = Sweep(study, tuple(results)).models() if study.branch_axis else {}
    return {label: sweep_multipliers(sweep, flops_ratios(study, sweep.results[0].setting))
            for label, sweep in found.items()}


@dataclass(frozen=True)
class Report:
    """A study's written report: its page and the page's Markdown without the figures, as the index shows it."""

    path: Path
    markdown: str


def write_report(study: Study, store: CellStore) -> Path:
    """results/<name>.md, .json and plots from the cell results in `store` (no training)."""
    return report_study(study, store).path


def report_study(study: Study, store: CellStore) -> Report:
    """`write_report`, returning the report with its Markdown for `write_index`."""
    results = store.read_results(study)
    root = Path(study.results)
    found, trends = budget_multipliers(study, results), budget_trends(study, results)
    markdown = markdown_report(study, store, results, found, trends)
    figures = []  # (what it shows, its file)
    if results:
        figures += [(f"Δ vs {study.baseline}", f"{study.name}_difference.png"),
                    ("Δ along training", f"{study.name}_curves.png")]
        plot_differences(study, results, root / f"{study.name}_difference.png")
        plot_curve_differences(study, results, root / f"{study.name}_curves.png")
        for label, fits in trends.items():
            name, shown = (f"{study.name}_{label}", f", {label}") if label else (study.name, "")
            if fits := [fit for fit in fits if fit]:
                plot_trend(study, fits, root / f"{name}_trend.png")
                figures.append((f"gains against the budget{shown}", f"{name}_trend.png"))
            if multipliers := found[label]:
                plot_multipliers(study, multipliers, root / f"{name}_multiplier.png")
                figures.append((f"multipliers against the budget{shown}", f"{name}_multiplier.png"))
    text = markdown + format_figures(figures)
    atomic_write_bytes(root / f"{study.name}.md", text.encode())
    summary = {label: table.to_dict() for label, table in summarize(study, results).items()}
    atomic_write_json(root / f"{study.name}.json", {"study": study.name, "title": study.title, "summary": summary})
    return Report(root / f"{study.name}.md", markdown)


@dataclass(frozen=True)
class Progress:
    """How far a set of studies is: their distinct cells at their first seeds and how many are finished; the more
    seeds cells (not also a first-seed cell of another study), finished and still wanted."""

    studies: int
    first: int
    first_finished: int
    more: int
    more_finished: int
    wanted: int


def _cell_paths(studies: list[Study], store: CellStore, seeds_of) -> set[Path]:
    return {store.result_path(study, cell) for study in studies for cell in study.cells(seeds_of(study))}


def progress(studies: list[Study], store: CellStore) -> Progress:
    """`Progress` of `studies`, their cells in `store`."""
    first = _cell_paths(studies, store, lambda study: study.seeds)
    more = _cell_paths(studies, store, lambda study: study.more_seeds) - first  # another study's first seed
    wanted = {store.result_path(study, cell) for study in studies for cell in uncertain_cells(study, store)} - first
    return Progress(len(studies), len(first), sum(p.exists() for p in first), len(more),
                    sum(p.exists() for p in more), len(wanted))


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


def setting_differences(studies: list[Study], store: CellStore, index: IndexPage | None = None) -> list[IndexEntry]:
    """Per distinct setting where the index's anchor method has results: its `IndexEntry`, each column filled from
    the first study that has it once the setting has its row."""
    index = index or IndexPage.load()
    entries: dict[str, IndexEntry] = {}
    for study in studies:
        results = store.read_results(study)
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


@dataclass(frozen=True)
class IndexSection:
    """A study's part of the index: its report's Markdown without figures, the results folder's name its figures
    lie in, and the settings of its mixing-map figures (`<name>_why.json`, where `depthattn study --explain` wrote
    them)."""

    name: str
    markdown: str
    folder: str
    why: tuple[str, ...]


def write_index(studies: list[Study], store: CellStore, path: Path, index: IndexPage | None = None,
                reports: Mapping[str, Report] | None = None) -> Path:
    """One page for the whole study, its cells in `store`: every distinct setting's key differences (the columns of
    `index`, by default study/index.toml's), then each study's report (from `reports`, by study name, where
    `report_study` wrote it already)."""
    reports = reports or {}
    index = index or IndexPage.load()
    entries = setting_differences(studies, store, index)
    root = Path(studies[0].results)
    figure = plot_overview(entries, index.labels, root / "overview.png", index.figure_title)
    sections = []
    for study in studies:
        report = reports.get(study.name)
        markdown = report.markdown if report else markdown_report(study, store)
        why = Path(study.results) / f"{study.name}_why.json"
        sections.append(IndexSection(study.name, markdown, Path(study.results).name,
                                     tuple(json.loads(why.read_text())["settings"]) if why.exists() else ()))
    text = format_index(index, progress(studies, store), entries, f"{root.name}/{figure.name}", sections)
    atomic_write_bytes(path, text.encode())
    return path
