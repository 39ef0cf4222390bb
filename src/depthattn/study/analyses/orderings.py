"""Whether budget sweeps of the same methods on different corpora order them the same way: the same model on two or
more corpora tells whether an ordering is about the method or about the text (configs/analysis/wikipedia_orderings.toml,
whose rule budget_sweep_wiki.toml pre-registered before its cells ran; configs/analysis/three_corpora_orderings.toml).

At every budget the sweeps all measure, each sweep's methods are ranked by their data multiplier over the baseline
(`depthattn.study.sweep.Sweep`: the same multipliers and seed resamples as the sweeps' own reports). For every pair of
sweeps the orders agree or not; each pair of methods that swaps is named, with whether each of the two sweeps
separates the two methods (the 95% seed-bootstrap interval of their multipliers' ratio excludes 1; none below
MIN_SEEDS seeds): a swap that neither sweep separates is within the seeds' noise. A sweep without every method's
multipliers yet waits, named with what it lacks; the others are compared while two or more are ready.
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
from ..sweep import REPEATS_FLAG, SeedBootstrap, one_model, read_sweeps


@dataclass
class Orderings:
    """Budget sweeps of the same methods (two or more), compared by the order of their multipliers."""

    title: str
    sweeps: list[Study]
    config_file: str

    @classmethod
    def load(cls, path: str | Path, results: str | None = None) -> Orderings:
        title, sweeps, path = read_sweeps(path, "orderings", "two or more study configs (paths relative to it) of "
                                          "the same methods", lambda n: n >= 2, results)
        return cls(title, sweeps, str(path))


@dataclass(frozen=True)
class Swap:
    """A pair of methods that two sweeps (`sweeps`, their positions among the compared) order differently, and
    whether each of the two separates them: by the bootstrap interval, by the calibrated one (None without
    resamples)."""

    pair: tuple[str, str]
    separated: tuple[bool | None, bool | None]
    separated_calibrated: tuple[bool | None, bool | None]
    sweeps: tuple[int, int] = (0, 1)


@dataclass(frozen=True)
class PairOrders:
    """Two of the compared sweeps (their positions) at one budget: whether their orders agree, the pairs that swap."""

    sweeps: tuple[int, int]
    same: bool
    swaps: tuple[Swap, ...]


@dataclass(frozen=True)
class BudgetOrders:
    """At one budget: each compared sweep's order of the methods (highest multiplier first), their multipliers, and
    every pair of sweeps' agreement."""

    label: str
    x: float
    orders: tuple[list[str], ...]
    k: tuple[dict[str, float], ...]
    pairs: tuple[PairOrders, ...]
    read_epochs: tuple[float | None, ...] = ()  # per sweep, the most passes over the data its multipliers read
    flag_epochs: tuple[float, ...] = ()  # per sweep, the epochs past which its rule flags a reading

    def repeats(self, sweep: int) -> bool:
        """Whether sweep `sweep`'s multipliers read the baseline's curve past its flag (REPEATS_FLAG epochs unless
        its rule says fewer) here."""
        epochs = self.read_epochs[sweep] if self.read_epochs else None
        flag = self.flag_epochs[sweep] if self.flag_epochs else REPEATS_FLAG
        return epochs is not None and epochs > flag

    @property
    def same(self) -> bool:
        """Whether every sweep orders the methods the same way."""
        return all(pair.same for pair in self.pairs)

    @property
    def swaps(self) -> list[Swap]:
        """The swaps of every pair of sweeps."""
        return [swap for pair in self.pairs for swap in pair.swaps]

    def rank(self, method: str) -> tuple[int, ...]:
        """`method`'s rank in each sweep's order (1: the highest multiplier)."""
        return tuple(order.index(method) + 1 for order in self.orders)


@dataclass(frozen=True)
class OrderingsFound:
    """Per budget every compared sweep measures its `BudgetOrders`, with each compared sweep's seed count; `compared`:
    the sweeps with every method's multipliers (their config files; none unless two or more are ready); `missing`:
    the others, each with what its first seed lacks."""

    missing: dict[str, str]
    budgets: list[BudgetOrders]
    seeds: list[int] | None = None
    compared: tuple[str, ...] = ()
    left_out: dict[str, str] | None = None  # a method some compared sweep lacks -> the sweeps that have it


def _separated(found: SeedBootstrap, a: str, b: str, i: int) -> bool | None:
    """Whether the sweep's resamples put the ratio of a's and b's multipliers at budget i away from 1 (None without
    resamples)."""
    if found.boot is None:
        return None
    low, high = percentile_interval(np.log(found.boot_of(a)[:, i]) - np.log(found.boot_of(b)[:, i]))
    return bool(low > 0 or high < 0)


def _separated_calibrated(found: SeedBootstrap, a: str, b: str, i: int) -> bool | None:
    """The same with the calibrated interval (study/calibrated.py) of the log ratio, the held-out documents'
    variance included where the sweep's cells store it (None below MIN_SEEDS seeds)."""
    if found.loo is None:
        return None
    log_ratio = np.log(found.k[a][i]) - np.log(found.k[b][i])
    documents = None if found.documents is None else (np.log(found.documents[a][:, i])
                                                      - np.log(found.documents[b][:, i]))
    low, high = jackknife_t(np.array(log_ratio), np.log(found.loo_of(a)[:, i]) - np.log(found.loo_of(b)[:, i]),
                            documents=documents)
    return bool(low > 0 or high < 0)


def _pair(found: list[SeedBootstrap], at: list[int], ks: tuple[dict[str, float], ...],
          orders: tuple[list[str], ...], first: int, second: int) -> PairOrders:
    """Sweeps `first` and `second` at one budget (`at`: its position in each sweep's budgets)."""
    a_k, b_k = ks[first], ks[second]
    swaps = tuple(Swap((a, b), (_separated(found[first], a, b, at[first]), _separated(found[second], a, b, at[second])),
                       (_separated_calibrated(found[first], a, b, at[first]),
                        _separated_calibrated(found[second], a, b, at[second])), (first, second))
                  for a, b in itertools.combinations(list(a_k), 2)
                  if (a_k[a] > a_k[b]) != (b_k[a] > b_k[b]))
    return PairOrders((first, second), orders[first] == orders[second], swaps)


def compare(orderings: Orderings) -> OrderingsFound:
    """Per budget the ready sweeps all measure: each one's order of the methods, and every pair's agreement."""
    loaded = [(study, *one_model(study, CellStore.of(study))) for study in orderings.sweeps]  # each in its results
    missing = {study.config_file: sweep.first_seed_gaps() for study, sweep, f in loaded
               if f is None or set(f.k) != set(study.methods) - {study.baseline}}  # an order of every method
    ready = [(study, f) for study, _, f in loaded if f is not None and study.config_file not in missing]
    if len(ready) < 2:
        return OrderingsFound(missing, [])
    found = [f for _, f in ready]
    methods = [m for m in found[0].k if all(m in f.k for f in found[1:])]
    left_out = {m: ", ".join(f"`{s.config_file}`" for s, f in ready if m in f.k)
                for m in dict.fromkeys(m for f in found for m in f.k) if m not in methods}
    budgets = []
    for label in (label for label in found[0].labels if all(label in f.labels for f in found[1:])):
        at = [f.labels.index(label) for f in found]
        ks = tuple({m: float(f.k[m][i]) for m in methods} for f, i in zip(found, at, strict=True))
        if any(np.isnan(list(k.values())).any() for k in ks):
            continue  # a budget only the baseline trains
        orders = tuple(sorted(methods, key=k.__getitem__, reverse=True) for k in ks)
        pairs = tuple(_pair(found, at, ks, orders, i, j) for i, j in itertools.combinations(range(len(found)), 2))
        read = tuple(max(float(f.read[m][i]) * f.epochs_per_x for m in methods) if f.epochs_per_x else None
                     for f, i in zip(found, at, strict=True))
        budgets.append(BudgetOrders(label, float(found[0].x[at[0]]), orders, ks, pairs, read,
                                    tuple(study.flag_epochs for study, _ in ready)))
    return OrderingsFound(missing, budgets, [len(f.seeds) for f in found], tuple(s.config_file for s, _ in ready),
                          left_out)
