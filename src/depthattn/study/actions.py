"""What `depthattn study` does with its study configs, one function a mode: load them (with a confirmation's
picks), run and report them, or predict from them and score predictions on them. Where cells stand and what they
cost: study/status.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..train import TrainingInterrupted
from .analyses.predictions import (
    extrapolations,
    predict,
    read_prediction,
    score,
    superseded,
    why_unscored,
    write_prediction,
)
from .mixing_maps import explain
from .multiplier import EXTRAPOLATION_LIMIT
from .picks import with_picks
from .render.analyses import format_score
from .report import IndexPage, report_study, write_index
from .runner import ExecutorOptions, run_study
from .spec import Study
from .store import CellStore


def load_studies(paths: list[str], out_dir: str | None = None, results: str | None = None,
                 index_config: str | None = None) -> tuple[list[Study], CellStore, IndexPage | None]:
    """The studies of `paths` (their checkpoints in `out_dir`, their results in `results`, where given), each
    confirmation with the picks of its search as it stands in those results, the store of their cells, and the index
    page's config: a bad one shows before anything trains. Says which confirmations still wait for their picks."""
    studies = [Study.load(path, out_dir=out_dir, results=results) for path in paths]
    folders = sorted({study.results for study in studies})
    if len(folders) > 1:
        raise ValueError(f"the studies keep their results in {', '.join(folders)}; studies run together share one "
                         "results folder: give --results")
    store = CellStore.of(studies[0])
    index = IndexPage.load(index_config) if index_config else None
    studies = [with_picks(study, store) for study in studies]
    for study in studies:
        if study.waiting:
            print(f"study {study.name}: {study.waiting}")
    return studies, store, index


def run_studies(studies: list[Study], store: CellStore, executor: ExecutorOptions, methods: list[str] | None = None,
                seeds: list[int] | None = None, report_only: bool = False, why: bool = False,
                index_path: str | None = None, index: IndexPage | None = None) -> int:
    """Train each study's cells still to run (unless `report_only`; their results go into `store`), with a
    confirmation's picks as its search stands when its turn comes (the search may have finished in this run), write its
    report (and with `why` its mixing maps), then the index page at `index_path`. The exit status: 0 when every cell is
    finished (or a detached Slurm submission is out), 1 when some are still out or failed, the signal's when one stopped
    the run."""
    complete, reports, studies = True, {}, list(studies)
    for i, study in enumerate(studies):
        study = studies[i] = with_picks(study, store)
        if not report_only:
            started = time.perf_counter()
            try:
                finished = run_study(study, store, executor.executor_for(study), methods, seeds)
            except TrainingInterrupted as stopped:  # Ctrl-C or SIGTERM: one line, the signal's exit status
                print(f"depthattn study: {stopped}", file=sys.stderr, flush=True)
                return stopped.exit_status
            if finished:
                print(f"study {study.name}: done in {time.perf_counter() - started:.0f} s")
            else:
                complete = False
                print(f"study {study.name}: cells are still out or failed; --status shows them, and the same command "
                      "submits what has no result yet")
        reports[study.name] = report_study(study, store)
        print(f"report: {reports[study.name].path}")
        if why:
            print(f"why: {explain(study)}")
    if index_path:
        print(f"index: {write_index(studies, store, Path(index_path), index, reports)}")
    return 0 if complete or executor.detach else 1


def predict_for(studies: list[Study], store: CellStore, target: str, date: str, assumes: str, folder: Path) -> int:
    """Write each study's prediction (from its finished sweep, in `store`) for every budget of the study config
    `target`, dated `date`, into `folder`."""
    for study in studies:
        write_dated(predict(study, store, Study.load(target), date, assumes), folder)
    return 0


def score_predictions(studies: list[Study], store: CellStore, path: str) -> int:
    """Print the prediction file `path` scored on each study's finished cells in `store` (and why it is superseded,
    where it is)."""
    for study in studies:
        prediction = read_prediction(path)
        if why := superseded(path):
            print(f"superseded: {why}")
        rows = score(prediction, study, store)
        print(format_score(prediction, rows, "" if rows else why_unscored(prediction, study, store)))
    return 0


def write_dated(prediction: dict, folder: Path) -> None:
    """Write a prediction file into `folder`; say where, and which of its budgets read the source far past what it
    measured."""
    print(f"prediction: {write_prediction(prediction, folder)}")
    if far := extrapolations(prediction):
        print(f"warning: the prediction reads {prediction['source']} more than {EXTRAPOLATION_LIMIT:g} x past what "
              f"it measured at {len(far)} of its budgets (marked extrapolated in the file): " + "; ".join(far),
              file=sys.stderr)
