"""`depthattn harness`: downstream tasks through lm-evaluation-harness."""

from __future__ import annotations

import argparse
import sys

from transformers.utils import logging as hf_logging

from ..files import atomic_write_json, check_output


def _limit(text: str) -> int | float:
    """--limit: a number of examples (>= 1) or a fraction of each task (< 1), as lm-eval takes it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of examples or a fraction") from None
    return int(value) if value >= 1 and value.is_integer() else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..evaluate.harness import DEFAULT_BATCH_SIZE, LOCAL_TAG, LOCAL_TASKS, TASK_SETS
    from ..loading import DTYPE_CHOICES

    parser.add_argument("model", metavar="MODEL_DIR",
                        help="a saved model folder (e.g. runs/tiny/depth_attention/final)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--tasks", nargs="+", metavar="TASK",
                       help="lm-eval task, group or tag names (also comma-separated); the local ones: "
                            f"{', '.join(LOCAL_TASKS)} (tag {LOCAL_TAG})")
    which.add_argument("--task-set", choices=list(TASK_SETS),
                       help="paper8: the paper's eight tasks (needs their data: Hub or datasets cache); "
                            "local: the offline tasks from the embedded Shakespeare corpus's held-out split, for a "
                            "model trained on that corpus")
    parser.add_argument("--num-fewshot", nargs="+", type=int, default=[0], metavar="N",
                        help="few-shot examples; several counts run one after the other, e.g. 0 5 (default 0)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="requests per forward pass (default %(default)s)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="longest context in tokens, longer ones lose their start (default: the training seq_len "
                             "from train_config.json above the model folder, else max_position_embeddings)")
    parser.add_argument("--limit", type=_limit, metavar="N",
                        help="only the first N examples per task (a fraction if < 1): for quick checks only")
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the model folder's)")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", help="weights dtype (default %(default)s)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--skip-unreachable", action="store_true",
                        help="run the tasks whose data loads and list the others in the results, instead of failing")
    parser.add_argument("--bootstrap-iters", type=int, default=100_000, metavar="N",
                        help="bootstrap resamples for the stderr of non-mean metrics (lm-eval's default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="lm-eval's random seeds (default %(default)s)")
    parser.add_argument("--any-corpus", action="store_true",
                        help="run the local tasks on a model trained on other data than their corpus (refused "
                             "otherwise: their scores would not measure it)")
    parser.add_argument("--out", metavar="FILE", help="write the results and their metadata as JSON")
    parser.add_argument("--verbose", action="store_true", help="show lm-eval's log")


def format_table(result: dict) -> str:
    """A small text table: one row per (few-shot count, task, metric)."""
    lines = [f"{'shots':>5}  {'task':<34} {'metric':<12} {'value':>9} {'stderr':>8}"]
    for shots, run in result["results"].items():
        for task, metrics in (run["results"] or {}).items():
            for key, value in metrics.items():
                metric, _, _ = key.partition(",")
                if metric in ("alias", "name", "sample_len") or metric.endswith("_stderr") \
                        or not isinstance(value, (int, float)):
                    continue
                stderr = metrics.get(key.replace(metric, f"{metric}_stderr", 1))
                stderr = f"{stderr:8.4f}" if isinstance(stderr, (int, float)) else f"{'':8}"
                lines.append(f"{shots:>5}  {task:<34} {metric:<12} {value:9.4f} {stderr}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..evaluate.harness import run_harness

    hf_logging.disable_progress_bar()
    if args.out:
        check_output(args.out)
    result = run_harness(
        args.model, tasks=args.tasks, task_set=args.task_set, num_fewshot=args.num_fewshot, batch_size=args.batch_size,
        max_length=args.max_length, limit=args.limit, tokenizer=args.tokenizer, dtype=args.dtype, device=args.device,
        skip_unreachable=args.skip_unreachable, bootstrap_iters=args.bootstrap_iters, seed=args.seed,
        verbose=args.verbose, any_corpus=args.any_corpus,
    )
    if result["local_tasks"]:
        print(result["local_tasks"], file=sys.stderr)
    print(format_table(result))
    print(f"lm-eval {result['lm_eval_version']}, dtype {result['dtype']}, batch size {result['batch_size']}, "
          f"task versions {result['task_versions']}")
    if result["skipped_tasks"]:
        print(f"skipped (data unreachable): {', '.join(result['skipped_tasks'])}", file=sys.stderr)
    if args.out:
        atomic_write_json(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m depthattn.commands.harness MODEL_DIR ...`: the same as `depthattn harness`."""
    parser = argparse.ArgumentParser(prog="python -m depthattn.commands.harness", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError, ImportError) as error:
        print(f"depthattn harness: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
