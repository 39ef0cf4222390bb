"""`depthattn study`: run studies (configs/study/*.toml) on this machine or a Slurm cluster, show where their cells
stand, estimate what they cost, and write their reports."""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..study import Cell, Executor, Study


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="*", help="study configs (configs/study/*.toml), run in this order")
    parser.add_argument("--report-only", action="store_true",
                        help="write the reports from finished cells; train nothing")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="where cells train: local processes (default) or a Slurm job array (depthattn[slurm])")
    parser.add_argument("--workers", type=int, default=1, help="local: cells trained at once (processes)")
    parser.add_argument("--threads", type=int, default=None, help="local: torch threads per process")
    parser.add_argument("--tasks-per-cell", type=int, default=1,
                        help="local: processes per cell, under torch.distributed (DDP or FSDP2, train.parallel)")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the config's [slurm] table, e.g. --slurm partition=gpu "
                             "--slurm time=2:00:00 --slurm gpus_per_cell=8 (repeatable)")
    parser.add_argument("--detach", action="store_true",
                        help="slurm: submit and return; run the same command again to submit what remains")
    parser.add_argument("--poll", type=float, default=30.0, help="slurm: seconds between queue checks while waiting")
    parser.add_argument("--status", action="store_true",
                        help="list every cell: finished or to run (and the step it resumes at) locally; finished, "
                             "running, pending, failed (job id, log) or not submitted with slurm")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the cells that would run and what each costs (FLOPs, GPU-hours at --mfu); "
                             "train nothing")
    parser.add_argument("--mfu", type=float, default=0.4, help="--dry-run: model FLOPs utilisation (default 0.4)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="--dry-run: the GPU's peak in TFLOP/s (default: an H100's dense bf16 peak)")
    parser.add_argument("--methods", nargs="+", help="run only these methods")
    parser.add_argument("--seeds", nargs="+", type=int, help="run only these seeds")
    parser.add_argument("--why", action="store_true", help="also write depth-weight maps and learned mixing weights "
                        "(value residual's lambdas) of seed 0 (needs the cells' models in the out dir)")
    parser.add_argument("--index", help="also write one page for all the given studies (docs/results/study.md)")
    parser.add_argument("--index-config", help="--index: the page's title and the columns of its table, as in "
                        "depthattn/study/index.toml (the default)")
    parser.add_argument("--predict-for", metavar="TARGET",
                        help="write the prediction of this finished sweep's multiplier trend for every budget of the "
                             "study config TARGET (the GPU ladder) into --predictions; train nothing")
    parser.add_argument("--assumes", default="",
                        help="--predict-for: what the prediction assumes about the step from this sweep to TARGET")
    parser.add_argument("--prediction-date", type=prediction_date, metavar="YYYY-MM-DD",
                        help="--predict-for: the date the prediction's file is named and dated by (default today; "
                             "not earlier: a prediction states when it was made, before the cells it predicts)")
    parser.add_argument("--predictions", default="docs/results/predictions",
                        help="--predict-for: the folder of prediction files (default %(default)s)")
    parser.add_argument("--score-predictions", metavar="FILE",
                        help="compare a prediction file with this study's finished cells; train nothing")
    parser.add_argument("--analysis", action="append", metavar="FILE",
                        help="write the report of an analysis across sweeps (configs/analysis/*.toml: the depth axis, "
                             "the orderings on two corpora) into --results; with --predict-for, the depth axis's "
                             "prediction; train nothing (repeatable)")
    parser.add_argument("--out-dir", help="checkpoints and logs (default: the config's out_dir, runs/study)")
    parser.add_argument("--results",
                        help="cell results and reports (default: the config's results, docs/results/study)")


def prediction_date(text: str) -> str:
    """--prediction-date: a calendar date as YYYY-MM-DD, today or later."""
    try:
        date = datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date as YYYY-MM-DD, e.g. "
                                         f"{datetime.date.today().isoformat()}") from None
    if date < datetime.date.today():
        raise argparse.ArgumentTypeError(f"{text} is before today ({datetime.date.today().isoformat()}): a "
                                         "prediction is never dated before it was made; give today or a later date")
    return date.isoformat()


def make_executor(args: argparse.Namespace, study: Study) -> Executor:
    from ..study.local import LocalExecutor
    from ..study.slurm import SlurmExecutor, SlurmSettings

    if args.executor == "local":
        return LocalExecutor(args.workers, args.threads, args.tasks_per_cell)
    return SlurmExecutor(SlurmSettings.from_table(study.slurm, args.slurm), study.out_dir, args.poll,
                         wait=not args.detach)


def wanted_cells(study: Study, args: argparse.Namespace) -> list[Cell]:
    """The cells this command would train now: the study's seeds, then more seeds where intervals span zero."""
    from ..study.wanted import pending_cells, uncertain_cells

    cells = pending_cells(study, args.seeds, args.methods)
    return cells if args.seeds or args.methods else cells + uncertain_cells(study)


def dry_run(study: Study, args: argparse.Namespace) -> None:
    from ..study.pricing import H100_BF16_TFLOPS, gpu_hours, run_flops
    from ..study.slurm import SlurmSettings

    peak = args.peak_tflops or H100_BF16_TFLOPS
    cells = wanted_cells(study, args)
    print(f"study {study.name}: {len(cells)} cells would run, {make_executor(args, study).describe()}")
    if args.executor == "slurm":
        settings = SlurmSettings.from_table(study.slurm, args.slurm)
        print("sbatch:", ", ".join(f"{k}={v}" for k, v in settings.submitit_parameters(study.name).items() if v))
    total_flops = total_hours = separate = 0.0
    for cell in cells:
        cost = run_flops(study, cell.setting, cell.method)
        hours = gpu_hours(cost["flops"], args.mfu, peak)
        total_flops, total_hours = total_flops + cost["flops"], total_hours + hours
        separate += cost["separate_flops"]
        print(f"  {cell.label}: {cost['params'] / 1e6:,.1f}M params, "
              f"{cost['tokens'] / 1e9:,.3f}B tokens, {cost['flops']:.2e} FLOPs, {hours:,.2f} GPU-h")
    print(f"study {study.name}: {total_flops:.2e} FLOPs, {total_hours:,.2f} GPU-hours at {args.mfu:.0%} MFU of "
          f"{peak:g} TFLOP/s")
    if study.branch_axis and total_flops:
        print(f"study {study.name}: every budget as a run of its own would cost {separate:.2e} FLOPs, "
              f"{gpu_hours(separate, args.mfu, peak):,.2f} GPU-hours: {separate / total_flops:.2f} x "
              "the branched runs")


def status(study: Study, args: argparse.Namespace) -> None:
    from ..study import Cell
    from ..study.slurm import print_status

    cells = [Cell(setting, method, seed) for seed in study.seeds + study.more_seeds for setting in study.settings()
             for method in study.methods]
    if args.executor == "slurm":
        print_status(study, make_executor(args, study), cells)
        return
    wanted = {study.result_path(cell) for cell in wanted_cells(study, args)}
    done = sum(study.has_result(cell) for cell in cells)
    resumes = {}  # cell to run -> the step its run resumes at
    for cell in cells:
        path = study.result_path(cell)
        if path.exists() or path in wanted:
            if not path.exists():
                resumes[cell] = _resumes_at(study, cell)
            print(f"{'finished' if path.exists() else 'to run':>13}  {study.cell_path(cell)}" + (
                f" (resumes at step {resumes[cell]:,} of {study.cell_config(cell).train.steps:,})"
                if resumes.get(cell) else ""))
    print(f"study {study.name}: {done} finished, {len(wanted)} to run" + _time_left(study, resumes))


def _resumes_at(study, cell) -> int:
    """The step a cell's run resumes at on this machine: its newest whole checkpoint's, 0 without one."""
    from ..train.checkpoint import STEP_DIR, newest_good_checkpoint

    checkpoint = newest_good_checkpoint(Path(study.out_dir) / study.cell_path(cell))
    return 0 if checkpoint is None else int(STEP_DIR.match(checkpoint.name)[1])


def _time_left(study, resumes: dict) -> str:
    """'; about N hours of training left ...' from the training tokens the cells to run have left and each method's
    median speed (tokens per second) in its cells that finished here; '' before any has."""
    from ..study.pricing import tokens_left

    speeds: dict[str, list[float]] = {}
    for result in study.read_results():
        if (speed := result.record.get("tokens_per_s")) and speed > 0:  # not in files of old releases
            speeds.setdefault(result.method, []).append(speed)
    timed = [cell for cell in resumes if cell.method in speeds]
    if not timed:
        return ""
    seconds = sum(tokens_left(study, cell, resumes[cell]) / statistics.median(speeds[cell.method]) for cell in timed)
    untimed = sorted({cell.method for cell in resumes} - set(speeds))
    return (f"; about {duration(seconds)} of training left for one worker (--workers N divides it), at the "
            "median tokens per second of each method's finished cells, evaluations not counted"
            + (f"; {', '.join(untimed)} not counted: no finished cell to time" if untimed else ""))


def duration(seconds: float) -> str:
    """'1.5 hours' from an hour on, '12 minutes' under one, 'a minute' under a minute and a half."""
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} hours"
    minutes = round(seconds / 60)
    return "a minute" if minutes <= 1 else f"{minutes} minutes"


def predictions(studies: list[Study], args: argparse.Namespace) -> int:
    from ..study import Study
    from ..study.predictions import predict, read_prediction, score, superseded, why_unscored
    from ..study.render.analyses import format_score

    for study in studies:
        if args.predict_for:
            target = Study.load(args.predict_for)
            write_dated(predict(study, target, args.prediction_date or datetime.date.today().isoformat(),
                                args.assumes), args)
        else:
            prediction = read_prediction(args.score_predictions)
            if why := superseded(args.score_predictions):
                print(f"superseded: {why}")
            rows = score(prediction, study)
            print(format_score(prediction, rows, "" if rows else why_unscored(prediction, study)))
    return 0


def write_dated(prediction: dict, args: argparse.Namespace) -> None:
    """Write a prediction file; say where, and which of its budgets read the source far past what it measured."""
    from ..study.multiplier import EXTRAPOLATION_LIMIT
    from ..study.predictions import extrapolations, write_prediction

    print(f"prediction: {write_prediction(prediction, Path(args.predictions))}")
    if far := extrapolations(prediction):
        print(f"warning: the prediction reads {prediction['source']} more than {EXTRAPOLATION_LIMIT:g} x past what "
              f"it measured at {len(far)} of its budgets (marked extrapolated in the file): " + "; ".join(far),
              file=sys.stderr)


def analyses(args: argparse.Namespace) -> int:
    from ..files import atomic_write_bytes
    from ..study import Study
    from ..study.depth_axis import DepthAxis, depth_trend
    from ..study.orderings import Orderings, compare
    from ..study.predictions import predict_with_depth
    from ..study.render.analyses import format_depth_axis, format_orderings
    from ..train.config import config_path, read_toml

    if args.configs:
        raise ValueError("--analysis reads the sweeps its file names; give no study configs beside it")
    for path in args.analysis:
        kind = next(iter(read_toml(config_path(path), "analysis config", "configs/analysis/")), None)
        if kind == "depth_axis":
            axis = DepthAxis.load(path)
            if args.predict_for:
                write_dated(predict_with_depth(axis, Study.load(args.predict_for),
                                               args.prediction_date or datetime.date.today().isoformat(),
                                               args.assumes), args)
                continue
            text, results = format_depth_axis(axis, depth_trend(axis)), axis.sweeps[0].results
        elif kind == "orderings":
            if args.predict_for:
                raise ValueError(f"{path}: --predict-for reads a depth axis (configs/analysis/depth_axis.toml)")
            orderings = Orderings.load(path)
            text, results = format_orderings(orderings, compare(orderings)), orderings.sweeps[0].results
        else:
            raise ValueError(f"{path}: an analysis config has a [depth_axis] or an [orderings] table, not {kind!r}")
        out = Path(args.results or results) / f"{Path(path).stem}.md"
        atomic_write_bytes(out, text.encode())
        print(f"analysis: {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from ..study import IndexPage, Study, explain, report_study, run_study, with_picks, write_index
    from ..train import TrainingInterrupted

    if args.analysis:
        return analyses(args)
    if not args.configs:
        raise ValueError("give one or more study configs (configs/study/*.toml), or --analysis FILE")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    studies = [Study.load(path, out_dir=args.out_dir, results=args.results) for path in args.configs]
    index = IndexPage.load(args.index_config) if args.index_config else None  # a bad one shows before training
    studies = [with_picks(study) for study in studies]  # a confirmation's picks, as its search stands in these results
    for study in studies:
        if study.waiting:
            print(f"study {study.name}: {study.waiting}")
    if args.predict_for or args.score_predictions:
        return predictions(studies, args)
    if args.status or args.dry_run:
        for study in studies:
            status(study, args) if args.status else dry_run(study, args)
        return 0
    complete, reports = True, {}
    for study in studies:
        if not args.report_only:
            started = time.perf_counter()
            try:
                finished = run_study(study, make_executor(args, study), args.methods, args.seeds)
            except TrainingInterrupted as stopped:  # Ctrl-C or SIGTERM: one line, the signal's exit status
                print(f"depthattn study: {stopped}", file=sys.stderr, flush=True)
                return stopped.exit_status
            if finished:
                print(f"study {study.name}: done in {time.perf_counter() - started:.0f} s")
            else:
                complete = False
                print(f"study {study.name}: cells are still out or failed; --status shows them, and the same command "
                      "submits what has no result yet")
        reports[study.name] = report_study(study)
        print(f"report: {reports[study.name].path}")
        if args.why:
            print(f"why: {explain(study)}")
    if args.index:
        print(f"index: {write_index(studies, Path(args.index), index, reports)}")
    return 0 if complete or args.detach else 1
