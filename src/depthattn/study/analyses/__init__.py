"""Analyses across sweeps, registered by the table of their config (configs/analysis/*.toml), as methods are by
name: each loads the sweeps its config names, computes a frozen record from them and renders that record as a page.
A new analysis is a module (its load and compute), a render function (study/render/) and a line in ANALYSES."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...files import atomic_write_bytes
from ...train.config import config_path, read_toml
from ..render.analyses import format_depth_axis, format_headline, format_orderings
from .depth_axis import DepthAxis, depth_trend
from .headline import Headline, headline_table
from .orderings import Orderings, compare
from .predictions import predict_with_depth


@dataclass(frozen=True)
class Analysis:
    """load(config path, results) -> the analysis's sweeps, their cells read in results (by default each sweep's
    own); compute(loaded) -> its frozen record; render(loaded, record) ->
    its page's Markdown; predict(loaded, target study, date, assumes) -> a prediction file's content, for an
    analysis that predicts (None otherwise)."""

    load: Callable[[str | Path, str | None], Any]
    compute: Callable[[Any], Any]
    render: Callable[[Any, Any], str]
    predict: Callable[..., dict] | None = None

    def write(self, path: str | Path, results: str | None = None) -> Path:
        """The analysis of the config at `path` as <results>/<config name>.md, its sweeps' cells read there too (by
        default each sweep's own results folder, the page in the first's)."""
        loaded = self.load(path, results)
        out = Path(results or loaded.sweeps[0].results) / f"{Path(path).stem}.md"
        atomic_write_bytes(out, self.render(loaded, self.compute(loaded)).encode())
        return out


ANALYSES = {
    "depth_axis": Analysis(DepthAxis.load, depth_trend, format_depth_axis, predict_with_depth),
    "orderings": Analysis(Orderings.load, compare, format_orderings),
    "headline": Analysis(Headline.load, headline_table, format_headline),
}


def analysis_of(path: str | Path) -> Analysis:
    """The registered analysis of the config at `path`, by its table."""
    table = next(iter(read_toml(config_path(path), "analysis config", "configs/analysis/")), None)
    if table not in ANALYSES:
        raise ValueError(f"{path}: an analysis config has one of the tables "
                         f"{', '.join(f'[{name}]' for name in ANALYSES)}, not {table!r}")
    return ANALYSES[table]
