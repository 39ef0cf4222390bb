"""`depthattn <command>`: the command-line entry point."""

from __future__ import annotations

import argparse
import os
import sys

from .data.files import NoSpaceLeft


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="depthattn", description="Depth-Attention language models")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    from .data.prepare import add_arguments as add_prepare_arguments, run as run_prepare

    add_prepare_arguments(commands.add_parser("prepare", help="text -> tokenizer -> token shards + manifest"))

    train = commands.add_parser(
        "train", help="train a model", epilog="Any config value can be overridden: --optim.lr 3e-4 --train.steps 100")
    train.add_argument("--config", help="a TOML training config (see configs/)")
    train.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out_dir")

    generate = commands.add_parser("generate", help="continue a prompt with a saved model")
    generate.add_argument("model", help="a folder saved by train: final/ or checkpoints/step_* "
                                        "(e.g. runs/demo/depth_attention/final)")
    generate.add_argument("prompt", help='the text to continue; "" starts a new document')
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    generate.add_argument("--top-k", type=int, default=50, help="0: no limit")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the model folder's)")
    generate.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                          help="torch.compile the decoding steps (static KV cache; backend default inductor)")

    from .evaluate.study import add_arguments as add_study_arguments, run as run_study

    add_study_arguments(commands.add_parser(
        "study", help="sweeps of methods x seeds over model, data and budget axes, with paired statistics"))

    from .evaluate.costs import add_arguments as add_costs_arguments, run as run_costs
    from .evaluate.depth_map import add_arguments as add_depth_map_arguments, run as run_depth_map
    from .evaluate.harness import add_arguments as add_harness_arguments, run as run_harness
    from .evaluate.perplexity import add_arguments as add_eval_arguments, run as run_eval

    add_eval_arguments(commands.add_parser("eval", help="loss, perplexity and bits per byte on token shards or text"))
    add_harness_arguments(commands.add_parser("harness", help="downstream tasks through lm-evaluation-harness"))
    add_depth_map_arguments(commands.add_parser(
        "depth-map", help="mean depth-attention weight per (target, source) layer: PNG + JSON (paper Fig. 3)"))

    add_costs_arguments(commands.add_parser(
        "costs", help="parameters, extra FLOPs, activation I/O, KV cache and state of every method (paper Table 2)"))

    from .serve import add_arguments as add_serve_arguments, run as run_serve

    add_serve_arguments(commands.add_parser("serve", help="an OpenAI-compatible HTTP server for a saved model"))

    demo = commands.add_parser("demo", help="train Depth-Attention and its vanilla twin on the embedded corpus")
    demo.add_argument("--out", default="runs/demo", help="output folder (default %(default)s)")
    demo.add_argument("--steps", type=int, default=None, help="training steps per model")

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "train":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "prepare":
            return run_prepare(args)
        if args.command == "train":
            from .train import TrainConfig, train as run_training

            summary = run_training(TrainConfig.load(args.config, extra), resume=args.resume)
            if os.environ.get("RANK", "0") == "0":
                print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})
            return 0
        if args.command == "generate":
            from .generate import generate_text

            print(generate_text(args.model, args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed,
                                args.tokenizer, args.compile))
            return 0
        if args.command == "study":
            return run_study(args)
        if args.command == "eval":
            return run_eval(args)
        if args.command == "harness":
            return run_harness(args)
        if args.command == "depth-map":
            return run_depth_map(args)
        if args.command == "costs":
            return run_costs(args)
        if args.command == "serve":
            return run_serve(args)
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(args)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError, RuntimeError, NoSpaceLeft) as error:
        print(f"depthattn {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
