"""`depthattn study`: run studies (configs/study/*.toml) and write their reports."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .report import write_index, write_report
from .runner import run_study
from .spec import Study
from .why import explain


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", help="study configs (configs/study/*.toml), run in this order")
    parser.add_argument("--report-only", action="store_true", help="write the reports from finished cells; train nothing")
    parser.add_argument("--workers", type=int, default=1, help="cells trained at once (processes)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--methods", nargs="+", help="run only these methods")
    parser.add_argument("--seeds", nargs="+", type=int, help="run only these seeds")
    parser.add_argument("--why", action="store_true", help="also write depth-weight maps and learned mixing weights "
                        "(value residual's lambdas) of seed 0 (needs the cells' models in the out dir)")
    parser.add_argument("--index", help="also write one page for all the given studies (docs/results/study.md)")
    parser.add_argument("--out-dir", help="checkpoints and logs (default: the config's out_dir, runs/study)")
    parser.add_argument("--results", help="cell results and reports (default: the config's results, docs/results/study)")


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    studies = [Study.load(path) for path in args.configs]
    for path, study in zip(args.configs, studies):
        study.out_dir = args.out_dir or study.out_dir
        study.results = args.results or study.results
        if study.confirm:  # the picks of the search as it stands in these results
            study.add_picks(Path(path).parent)
        if study.waiting:
            print(f"study {study.name}: {study.waiting}")
    for study in studies:
        if not args.report_only:
            started = time.perf_counter()
            run_study(study, args.workers, args.threads, args.methods, args.seeds)
            print(f"study {study.name}: done in {time.perf_counter() - started:.0f} s")
        print(f"report: {write_report(study)}")
        if args.why:
            print(f"why: {explain(study)}")
    if args.index:
        print(f"index: {write_index(studies, Path(args.index))}")
    return 0
