"""Whether two budget sweeps of the same methods order them the same way: the same model on two corpora tells
whether an ordering is about the method or about the text (configs/analysis/wikipedia_orderings.toml, whose rule
budget_sweep_wiki.toml pre-registered before its cells ran).

At every budget both sweeps measure, each sweep's methods are ranked by their data multiplier over the baseline
(`depthattn.study.sweep.Sweep`: the same multipliers and seed resamples as the sweeps' own reports).
The orders agree or not; each pair of methods that swaps is named, with whether each sweep separates the two (the
95% seed-bootstrap interval of their multipliers' ratio excludes 1; none below MIN_SEEDS seeds): a swap that
neither sweep separates is within the seeds' noise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..calibrated import jackknife_t
from ..fits import percentile_interval
from ..spec import Study
from ..store import CellStore
from ..sweep import SeedBootstrap, one_model, read_sweeps


@dataclass
class Orderings:
    """Two budget sweeps of the same methods, compared by the order of their multipliers."""

    title: str
    sweeps: list[Study]
    config_file: str

    @classmethod
    def load(cls, path: str | Path) -> Orderings:
        title, sweeps, path = read_sweeps(path, "orderings", "two study configs (paths relative to it) of the same "
                                          "methods", lambda n: n == 2)
        return cls(title, sweeps, str(path))


@dataclass(frozen=True)
class Swap:
    """A pair of methods the two sweeps order differently, and whether each sweep separates them: by the bootstrap
    interval, by the calibrated one (None without resamples)."""

    pair: tuple[str, str]
    separated: tuple[bool | None, bool | None]
    separated_calibrated: tuple[bool | None, bool | None]


@dataclass(frozen=True)
class BudgetOrders:
    """At one budget: each sweep's order of the methods (highest multiplier first), their multipliers, whether the
    orders agree and the pairs that swap."""

    label: str
    x: float
    orders: tuple[list[str], list[str]]
    k: tuple[dict[str, float], dict[str, float]]
    same: bool
    swaps: list[Swap]


@dataclass(frozen=True)
class OrderingsFound:
    """Per common budget its `BudgetOrders`, with each sweep's seed count; `missing`: the sweeps without cells yet,
    each with what its first seed lacks."""

    missing: dict[str, str]
    budgets: list[BudgetOrders]
    seeds: list[int] | None = None


def _separated(found: SeedBootstrap, a: str, b: str, i: int) -> bool | None:
    """Whether the sweep's resamples put the ratio of a's and b's multipliers at budget i away from 1 (None without
    resamples)."""
    if found.boot is None:
        return None
    low, high = percentile_interval(np.log(found.boot[a][:, i]) - np.log(found.boot[b][:, i]))
    return bool(low > 0 or high < 0)


def _separated_calibrated(found: SeedBootstrap, a: str, b: str, i: int) -> bool | None:
    """The same with the calibrated interval (study/calibrated.py) of the log ratio (None below MIN_SEEDS seeds)."""
    if found.loo is None:
        return None
    log_ratio = np.log(found.k[a][i]) - np.log(found.k[b][i])
    low, high = jackknife_t(np.array(log_ratio), np.log(found.loo[a][:, i]) - np.log(found.loo[b][:, i]))
    return bool(low > 0 or high < 0)


def compare(orderings: Orderings) -> OrderingsFound:
    """Per common budget: each sweep's order of the methods, whether the orders agree, and the pairs that swap."""
    loaded = [(study, *one_model(study, CellStore.of(study))) for study in orderings.sweeps]  # each in its results
    missing = {study.config_file: sweep.first_seed_gaps() for study, sweep, f in loaded
               if f is None or set(f.k) != set(study.methods) - {study.baseline}}  # an order of every method
    if missing:
        return OrderingsFound(missing, [])
    found = [f for _, _, f in loaded]
    first, second = found
    methods = [m for m in first.k if m in second.k]
    budgets = []
    for label in (label for label in first.labels if label in second.labels):
        at = [f.labels.index(label) for f in found]
        ks = tuple({m: float(f.k[m][i]) for m in methods} for f, i in zip(found, at))
        if any(np.isnan(k).any() for k in (np.array(list(k.values())) for k in ks)):
            continue  # a budget only the baseline trains
        orders = tuple(sorted(methods, key=k.get, reverse=True) for k in ks)
        swaps = [Swap((a, b), tuple(_separated(f, a, b, i) for f, i in zip(found, at)),
                      tuple(_separated_calibrated(f, a, b, i) for f, i in zip(found, at)))
                 for a, b in itertools.combinations(methods, 2) if (ks[0][a] > ks[0][b]) != (ks[1][a] > ks[1][b])]
        budgets.append(BudgetOrders(label, float(first.x[at[0]]), orders, ks, orders[0] == orders[1], swaps))
    return OrderingsFound({}, budgets, [len(f.seeds) for f in found])


