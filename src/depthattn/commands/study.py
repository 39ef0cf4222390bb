"""`depthattn study`: run studies (configs/study/*.toml) on this machine or a Slurm cluster, show where their cells
stand, estimate what they cost, and write their reports: its arguments; what each mode does is in the study
package (study/actions.py, study/status.py)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path


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
                        help="list every cell: finished, running (another process holds its run folder) or to run (and "
                             "the step it resumes at) locally; finished, "
                             "diverged, running, pending, running elsewhere (another process holds its run folder), "
                             "failed (job id, log) or not submitted with slurm")
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


def check_narrowing(studies, methods: list[str] | None, seeds: list[int] | None) -> None:
    """--methods and --seeds name methods and seeds of the studies given."""
    from ..field_checks import did_you_mean

    known = {method for study in studies for method in study.methods}
    for method in methods or ():
        if method not in known:
            raise ValueError(f"--methods {method}: not a method of {', '.join(s.config_file for s in studies)} "
                             f"(its methods: {', '.join(sorted(known))}){did_you_mean(method, known)}")
    known_seeds = {seed for study in studies for seed in study.seeds + study.more_seeds}
    for seed in seeds or ():
        if seed not in known_seeds:
            raise ValueError(f"--seeds {seed}: not a seed of {', '.join(s.config_file for s in studies)} (its "
                             f"seeds: {', '.join(map(str, sorted(known_seeds)))}); add it to the config's seeds")


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


def analyses(args: argparse.Namespace) -> int:
    from ..study import Study
    from ..study.actions import write_dated
    from ..study.analyses import analysis_of

    if args.configs:
        raise ValueError("--analysis reads the sweeps its file names; give no study configs beside it")
    ignored = [option for option, given in (("--methods", args.methods), ("--seeds", args.seeds),
                                            ("--status", args.status), ("--dry-run", args.dry_run),
                                            ("--score-predictions", args.score_predictions), ("--why", args.why),
                                            ("--index", args.index)) if given]
    if ignored:
        raise ValueError(f"--analysis reads the sweeps' finished cells, every seed and method its file names, and "
                         f"trains nothing: {', '.join(ignored)} does not apply; run it without")
    for path in args.analysis:
        analysis = analysis_of(path)
        if not args.predict_for:
            print(f"analysis: {analysis.write(path, args.results)}")
        elif analysis.predict is None:
            raise ValueError(f"{path}: --predict-for reads a depth axis (configs/analysis/depth_axis.toml)")
        else:
            write_dated(analysis.predict(analysis.load(path, args.results), Study.load(args.predict_for), _date(args),
                                         args.assumes), Path(args.predictions))
    return 0


def run(args: argparse.Namespace) -> int:
    from ..study import actions
    from ..study.runner import ExecutorOptions
    from ..study.status import dry_run, status

    if args.predict_for and not args.assumes.strip():
        raise ValueError("--predict-for needs --assumes: what the prediction takes for granted about the step from "
                         "the sweeps to the target (its file states it beside the numbers)")
    if args.analysis:
        return analyses(args)
    if not args.configs:
        raise ValueError("give one or more study configs (configs/study/*.toml), or --analysis FILE")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    executor = ExecutorOptions(executor=args.executor, workers=args.workers, threads=args.threads,
                               tasks_per_cell=args.tasks_per_cell, slurm=tuple(args.slurm), detach=args.detach,
                               poll=args.poll)
    if args.dry_run and not (0 < args.mfu <= 1 and (args.peak_tflops is None or args.peak_tflops > 0)):
        raise ValueError(f"--mfu must be in (0, 1] and --peak-tflops > 0, got {args.mfu} and {args.peak_tflops}")
    studies, store, index = actions.load_studies(args.configs, args.out_dir, args.results, args.index_config)
    check_narrowing(studies, args.methods, args.seeds)
    if args.predict_for:
        return actions.predict_for(studies, store, args.predict_for, _date(args), args.assumes, Path(args.predictions))
    if args.score_predictions:
        return actions.score_predictions(studies, store, args.score_predictions)
    if args.status:
        status(studies, store, executor, args.methods, args.seeds)
    elif args.dry_run:
        dry_run(studies, store, executor, args.methods, args.seeds, args.mfu, args.peak_tflops)
    else:
        return actions.run_studies(studies, store, executor, args.methods, args.seeds, args.report_only, args.why,
                                   args.index, index)
    return 0


def _date(args: argparse.Namespace) -> str:
    """--prediction-date, by default today."""
    return args.prediction_date or datetime.date.today().isoformat()
