"""`depthattn eval`: loss, perplexity and bits per byte of a model on token shards or text files."""

from __future__ import annotations

import argparse
import sys

from ..files import atomic_write_json, check_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..evaluate.perplexity import DEFAULT_BATCH_SIZE
    from ..loading import DTYPE_CHOICES

    parser.add_argument("model", metavar="MODEL_DIR",
                        help="a saved model folder (e.g. runs/tiny/depth_attention/final)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", metavar="PREPARED_DIR", help="a dataset written by `depthattn prepare`")
    source.add_argument("--text", nargs="+", metavar="FILE", help="UTF-8 text files, each one document")
    parser.add_argument("--split", default="val", help="split of --data (default %(default)s)")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="tokenizer folder (default: the model folder's, else --data's tokenizer/)")
    parser.add_argument("--block-size", type=int, metavar="N",
                        help="tokens per window (default: the training seq_len from train_config.json above the "
                             "model folder, else max_position_embeddings)")
    parser.add_argument("--stride", type=int, metavar="N",
                        help="window step; < block size is a sliding window where every scored token keeps at "
                             "least block_size - stride tokens of earlier context (default: block size, fixed blocks)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="windows per forward pass (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="score only the first N tokens")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32",
                        help="weights dtype (default %(default)s; auto: as saved); the loss is summed in float64")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument("--out", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ..evaluate.perplexity import evaluate_perplexity
    from ..loading import quiet_loading_bars

    quiet_loading_bars()
    if args.out:
        check_output(args.out)
    result = evaluate_perplexity(
        args.model, data=args.data, split=args.split, text=args.text, tokenizer=args.tokenizer,
        block_size=args.block_size, stride=args.stride, batch_size=args.batch_size, max_tokens=args.max_tokens,
        dtype=args.dtype, device=args.device, progress=not args.no_progress,
    )
    window = "fixed blocks" if result["stride"] == result["block_size"] else f"sliding, stride {result['stride']}"
    print(f"{result['tokens']:,} tokens ({result['bytes']:,} bytes), block size {result['block_size']} ({window}): "
          f"loss {result['loss']:.4f} nats/token, perplexity {result['perplexity']:.3f}, "
          f"bits per byte {result['bits_per_byte']:.4f}")
    if args.out:
        atomic_write_json(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
