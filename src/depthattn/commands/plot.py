"""`depthattn plot`: the loss and learning-rate curves of one or several training runs against tokens, in one PNG
(the figure the demo draws)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..files import check_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="training runs: their folders (train.out_dir) or metrics.jsonl files")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--title", default="", help="the figure's title")


def run(args: argparse.Namespace) -> int:
    from ..evaluate.plots import plot_loss_curves

    check_output(args.out)
    runs = [Path(run) for run in args.runs]
    folders = [(run if run.is_dir() else run.parent).resolve() for run in runs]  # metrics.jsonl here: its folder
    names = [str(f) for f in folders]
    for depth in range(1, max(len(f.parts) for f in folders) + 1):  # the shortest tails that tell the runs apart
        names = ["/".join(f.parts[-depth:]) for f in folders]
        if len(set(names)) == len(names):
            break
    print(f"plot: {plot_loss_curves(dict(zip(names, runs, strict=True)), args.out, args.title, lr=True)}")
    return 0
