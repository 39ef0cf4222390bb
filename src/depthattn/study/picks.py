"""A pre-registered search's ranking and picks, and a confirmation study with those picks among its methods: both
read from the results, so the spec (study/spec.py) stays what its config file says."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from .records import Cell
from .spec import Study


@dataclass(frozen=True)
class Ranked:
    """A search candidate's mean and sd of the search metric over its finished search seeds."""

    method: str
    seeds: int
    mean: float
    std: float


@dataclass(frozen=True)
class SearchResult:
    """A search's ranking (best first), its candidate cells still to go, and its picks (None until none is)."""

    ranking: tuple[Ranked, ...]
    missing: int
    picked: list[str] | None


def search_result(study: Study) -> SearchResult:
    """Each candidate's mean and sd of the metric over the finished search seeds of `study`'s search, best first,
    and the picks (None until every candidate cell of the search seeds is finished)."""
    search = study.search
    ranking, missing = [], 0
    for method in search.candidates:
        values = [result.metric(search.metric) for seed in search.seeds
                  if (result := study.read_result(Cell({}, method, seed))) is not None]
        missing += len(search.seeds) - len(values)
        if values:
            ranking.append(Ranked(method, len(values), statistics.fmean(values),
                                  statistics.stdev(values) if len(values) > 1 else 0.0))
    ranking.sort(key=lambda row: row.mean)
    picked = [row.method for row in ranking[:search.pick]] if not missing else None
    return SearchResult(tuple(ranking), missing, picked)


def with_picks(study: Study) -> Study:
    """A confirmation study (one with [study.confirm]) with the picks of the search it names among its methods, each
    contrasted with `against`, once that search is complete; until then with `waiting` saying why. Any other study
    as it is."""
    if study.searched is None:
        return study
    result = search_result(study.searched)
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
