"""`depthattn train`: train (or resume) a model from a TOML config and `--section.key value` overrides."""

from __future__ import annotations

import argparse
import os

from ..train import TrainConfig, train


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Any config value can be overridden: --optim.lr 3e-4 --train.steps 100"
    parser.add_argument("--config", help="a TOML training config (see configs/)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out_dir")


def run(args: argparse.Namespace) -> int:
    """`depthattn train`; `args.overrides` are the command line's --section.key value pairs."""
    summary = train(TrainConfig.load(args.config, args.overrides), resume=args.resume)
    if os.environ.get("RANK", "0") == "0":
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})
    return 0
