"""lm-eval's own command line with depthattn models and the local tasks available:

    python -m depthattn.evaluate.lm_eval_cli --model hf --model_args pretrained=DIR,device=cpu \
        --tasks depthattn_shakespeare_mc --batch_size 8

is `lm_eval ...` after `import depthattn` (which registers the depth_attention model type with transformers'
Auto classes, so `--model hf` loads a saved folder), with this package's task folder added to
`--include_path` unless the command names one, and lm-eval's git probe kept quiet outside a checkout."""

import sys

import depthattn  # noqa: F401  (registers the model type)

from .harness import quiet_lm_eval_git_probe
from .tasks import TASKS_DIR


def main(argv: list[str] | None = None) -> None:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        raise SystemExit("lm_eval_cli needs lm-evaluation-harness: pip install 'depthattn[eval]'") from None

    args = list(sys.argv[1:] if argv is None else argv)
    subcommand = args[0] if args and not args[0].startswith("-") else None
    # the user's own folder, however spelt (--include_path DIR, --include_path=DIR, or a prefix such as --include):
    # argparse keeps the last of two, so adding ours would drop theirs
    named = any(len(option) >= len("--incl") and "--include_path".startswith(option)
                for option in (arg.split("=", 1)[0] for arg in args))
    if subcommand in (None, "run", "ls", "validate") and not named and args:
        args += ["--include_path", str(TASKS_DIR)]
    saved, sys.argv = sys.argv, ["lm_eval", *args]  # lm-eval's parser reads sys.argv
    try:
        with quiet_lm_eval_git_probe():
            cli_evaluate()
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main()
