"""`depthattn <command>`: the command-line entry point."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="depthattn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    demo = commands.add_parser("demo", help="build a Depth-Attention model and its vanilla twin and compare them")
    demo.add_argument("--out", default="runs/demo", help="output folder")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
