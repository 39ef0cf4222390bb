"""A pre-registered search's ranking and picks, and a confirmation study with those picks among its methods: both
read from the results, so the spec (study/spec.py) stays what its config file says."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from .records import Cell
from .spec import Study
from .stats import Difference, SettingSummary, verdict
from .store import CellStore


@dataclass(frozen=True)
class Ranked:
    """A search candidate's mean and sd of the search metric over its finished search seeds, and how many of its
    search seeds diverged (a candidate with one ranks below every candidate without)."""

    method: str
    seeds: int
    mean: float
    std: float
    diverged: int = 0


@dataclass(frozen=True)
class SearchResult:
    """A search's ranking (best first), its candidate cells still to go, and its picks (None until none is)."""

    ranking: tuple[Ranked, ...]
    missing: int
    picked: list[str] | None


def search_result(study: Study, store: CellStore) -> SearchResult:
    """Each candidate's mean and sd of the metric over the finished search seeds of `study`'s search, best first,
    and the picks (None until every candidate cell of the search seeds is finished in `store`)."""
    search = study.search_rule
    ranking, missing = [], 0
    for method in search.candidates:
        values, diverged = [], 0
        for cell in (Cell({}, method, seed) for seed in search.seeds):
            if (result := store.read_result(study, cell)) is not None:
                values.append(result.metric(search.metric))
            elif store.has_diverged(study, cell):
                diverged += 1
        missing += len(search.seeds) - len(values) - diverged
        if values or diverged:
            ranking.append(Ranked(method, len(values), statistics.fmean(values) if values else math.nan,
                                  statistics.stdev(values) if len(values) > 1 else 0.0, diverged))
    ranking.sort(key=lambda row: (row.diverged > 0, row.mean if row.seeds else math.inf))
    picked = [row.method for row in ranking[:search.pick]] if not missing else None
    return SearchResult(tuple(ranking), missing, picked)


def with_picks(study: Study, store: CellStore) -> Study:
    """A confirmation study (one with [study.confirm]) with the picks of the search it names among its methods, each
    contrasted with `against`, once that search is complete in `store`; until then with `waiting` saying why. Any other
    study as it is."""
    if study.searched is None:
        return study
    result = search_result(study.searched, store)
    if result.picked is None:
        waiting = (f"the search of {study.searched.name} has {result.missing} candidate cells to go; its two picks "
                   "join this study when they are in")
        return dataclasses.replace(study, waiting=waiting)
    methods, contrasts = list(study.methods), [list(pair) for pair in study.contrasts]
    for method in result.picked:
        if method not in methods:
            methods.append(method)
        if [method, study.confirm["against"]] not in contrasts:
            contrasts.append([method, study.confirm["against"]])
    return dataclasses.replace(study, methods=methods, contrasts=contrasts, waiting="")


@dataclass(frozen=True)
class Confirmed:
    """A confirmation's method: its paired difference from `against` per setting (None where not run) and the
    rule's status: "yes" (better in every setting), "no" (worse somewhere, or no difference with every seed in) or
    "not decided"; `mean_difference`, over the settings it ran in (inf where none), names the closest."""

    method: str
    differences: tuple[Difference | None, ...]
    status: str
    mean_difference: float


@dataclass(frozen=True)
class Confirmation:
    """A confirmation study's outcome: `against`, the setting labels with results and each method's `Confirmed`."""

    against: str
    labels: tuple[str, ...]
    methods: tuple[Confirmed, ...]

    @property
    def winners(self) -> list[str]:
        return [m.method for m in self.methods if m.status == "yes"]

    @property
    def closest(self) -> Confirmed:
        return min(self.methods, key=lambda m: m.mean_difference)


def confirmation(study: Study, tables: dict[str, SettingSummary]) -> Confirmation:
    """Each contrast of `study` with its confirm's `against`, setting by setting (`tables`: `stats.summarize`), and
    the rule's status: a method is out once a setting shows it worse, or shows no difference with every seed in; it
    is in once every setting shows it better."""
    against = study.confirm["against"]
    labels = tuple(label for label, table in tables.items() if table.rows)
    all_seeds = len(study.seeds) + len(study.more_seeds)
    methods = []
    for method in (a for a, b in study.contrasts if b == against):
        found = tuple(c.difference if (c := tables[label].contrast(method, against)) else None for label in labels)
        verdicts = [verdict(d) if d else "not run" for d in found]
        if verdicts and all(v == "better" for v in verdicts):
            status = "yes"
        elif any(v == "worse" or (v == "no difference shown" and d is not None and d.n >= all_seeds)
                 for v, d in zip(verdicts, found, strict=True)):
            status = "no"
        else:
            status = "not decided"
        methods.append(Confirmed(method, found, status,
                                 statistics.fmean([d.diff_mean for d in found if d] or [math.inf])))
    return Confirmation(against, labels, tuple(methods))
