"""`depthattn <command>`: the command-line entry point.

Each command is a module of `depthattn.commands` with `add_arguments(parser)` and `run(args) -> int`; a new command
is one module there and one line of COMMANDS. Commands use the library; nothing in the library imports a command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .files import NoSpaceLeft

COMMANDS = {  # name: (its module in depthattn.commands, its help line)
    "prepare": ("prepare", "text -> tokenizer -> token shards + manifest"),
    "train": ("train", "train a model"),
    "generate": ("generate", "continue a prompt with a saved model"),
    "study": ("study", "sweeps of methods x seeds over model, data and budget axes, with paired statistics"),
    "eval": ("eval", "loss, perplexity and bits per byte on token shards or text"),
    "harness": ("harness", "downstream tasks through lm-evaluation-harness"),
    "depth-map": ("depth_map", "mean depth-attention weight per (target, source) layer: PNG + JSON (paper Fig. 3)"),
    "costs": ("costs", "parameters, extra FLOPs, activation I/O, KV cache and state of every method (paper Table 2)"),
    "convert": ("convert", "a Llama, Mistral, Qwen2, Qwen3 or reference Depth-Attention checkpoint into a depthattn "
                           "model"),
    "plot": ("plot", "loss and learning-rate curves of training runs against tokens, as a PNG"),
    "serve": ("serve", "an OpenAI-compatible HTTP server for a model folder (transformers serve)"),
    "demo": ("demo", "train Depth-Attention and its vanilla twin on the embedded corpus"),
    "checksums": ("checksums", "record a model folder's checksums again after its text files (config, tokenizer, "
                               "chat template) were edited"),
}
TAKES_OVERRIDES = {"train"}  # commands that accept any config value as --section.key value


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C outside training (which stops cleanly itself): no traceback
        print("depthattn: interrupted", file=sys.stderr)
        return 130


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line's arguments, with the chosen command's `run`; argparse's usage error (SystemExit 2) on a
    line the command does not take."""
    parser = argparse.ArgumentParser(prog="depthattn", description="Depth-Attention language models")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)  # the command: the only module imported
    subparsers = {}
    for name, (module_name, help_line) in COMMANDS.items():
        subparsers[name] = command = commands.add_parser(name, help=help_line)
        if name == chosen:
            module = importlib.import_module(f".commands.{module_name}", __package__)
            module.add_arguments(command)
            command.set_defaults(run=module.run)

    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in TAKES_OVERRIDES:  # the command's usage, which shows what it takes
        subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    return args


def _main(argv: list[str] | None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError, RuntimeError, NoSpaceLeft) as error:
        print(f"depthattn {args.command}: error: {error}", file=sys.stderr)
        return 1
    except PermissionError as error:
        print(f"depthattn {args.command}: error: permission denied: {error.filename}; check the permissions of "
              f"{Path(error.filename).parent if error.filename else 'the folders it writes'} or choose another "
              "folder", file=sys.stderr)
        return 1
    except OSError as error:  # what the system refused: a read-only file system, a path too long, ...
        where = f": {error.filename}" if error.filename else ""
        print(f"depthattn {args.command}: error: {error.strerror or error}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
