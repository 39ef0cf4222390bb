"""`depthattn costs`: parameters, extra FLOPs, activation I/O, KV cache and state of every method (the
paper's Table 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import DepthAttentionConfig
from ..files import atomic_write_json

if TYPE_CHECKING:
    from ..train import TrainConfig

PAPER_VOCAB = DepthAttentionConfig.vocab_size  # 50,304


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from ..evaluate.costs import DEFAULT_CONTEXT, DEFAULT_DTYPE_BYTES

    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="a TOML training config (configs/*.toml): its model preset, loops, overrides")
    source.add_argument("--preset", help="a model preset of depthattn.train.MODEL_PRESETS, e.g. 3b (default)")
    parser.add_argument("--num-loops", type=int, default=None, help="looped model (with --preset; default 1)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="vocabulary size (default: the config's model.overrides.vocab_size, else the "
                             "tokenizer of its prepared data.path, else 50304, the paper's)")
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT,
                        help="prefill length for the extra-state column (default %(default)s)")
    parser.add_argument("--dtype-bytes", type=int, default=DEFAULT_DTYPE_BYTES,
                        help="bytes per activation element (default %(default)s: bf16)")
    parser.add_argument("--methods", default=None,
                        help="comma-separated method presets (default: vanilla and every cross_layer method, plus "
                             "the config's own method)")
    parser.add_argument("--out", help="also write the records to this JSON file")
    return parser


def configs_from_args(args) -> tuple[dict[str, DepthAttentionConfig], str]:
    """The configs to price, and a line saying which vocabulary they have and where it comes from."""
    from ..evaluate.costs import default_methods, method_configs
    from ..presets import METHOD_PRESETS
    from ..train import MODEL_PRESETS, TrainConfig

    overrides, own_method, cfg = {}, None, None
    if args.config is not None:
        cfg = TrainConfig.load(args.config)
        preset, num_loops = cfg.model.preset, cfg.model.num_loops
        overrides = dict(cfg.model.overrides)
        overrides.setdefault("max_position_embeddings", cfg.model.max_position_embeddings)
        own_method = cfg.model.method
        if args.num_loops is not None:
            num_loops = args.num_loops
    else:
        preset, num_loops = args.preset or "3b", 1 if args.num_loops is None else args.num_loops
        if preset not in MODEL_PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(map(repr, MODEL_PRESETS))}; got {preset!r}")
    if num_loops < 1:
        raise ValueError(f"--num-loops must be >= 1, got {num_loops}")
    overrides["vocab_size"], vocab_line = vocabulary(args, cfg)
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods:
            raise ValueError(f"--methods {args.methods!r} names no method; give presets separated by commas, e.g. "
                             "vanilla,depth_attention")
    else:
        methods = default_methods()
        methods += [own_method] if own_method and own_method not in methods else []
    unknown = [m for m in methods if m not in METHOD_PRESETS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(map(repr, unknown))}; choose among {', '.join(METHOD_PRESETS)}")
    return method_configs(MODEL_PRESETS[preset], methods, num_loops, overrides), vocab_line


def vocabulary(args, cfg: TrainConfig | None) -> tuple[int, str]:
    """The vocabulary size that training builds (its override, else the data's tokenizer), and where it comes from."""
    if args.vocab_size is not None:
        return args.vocab_size, f"vocabulary: {args.vocab_size:,} tokens (--vocab-size)"
    if cfg is None:
        return PAPER_VOCAB, f"vocabulary: {PAPER_VOCAB:,} tokens, the paper's (--vocab-size N to change)"
    if "vocab_size" in cfg.model.overrides:
        size = cfg.model.overrides["vocab_size"]
        return size, f"vocabulary: {size:,} tokens (model.overrides.vocab_size)"
    from ..data.manifest import MANIFEST_NAME, read_manifest

    if (Path(cfg.data.path) / MANIFEST_NAME).is_file():
        size = read_manifest(cfg.data.path)["tokenizer"]["vocab_size"]
        return size, f"vocabulary: {size:,} tokens, the tokenizer of {cfg.data.path}"
    return PAPER_VOCAB, (f"vocabulary: {PAPER_VOCAB:,} tokens assumed (the paper's), as {cfg.data.path} is not "
                         "prepared yet: prepare it (depthattn prepare), or pass --vocab-size N")


def run(args) -> int:
    from ..evaluate.costs import costs_table, format_table

    if args.context < 0 or args.dtype_bytes <= 0:
        raise ValueError(f"--context must be >= 0 and --dtype-bytes > 0, got {args.context} and {args.dtype_bytes}")
    configs, vocab_line = configs_from_args(args)
    records = costs_table(configs, args.context, args.dtype_bytes)
    print(format_table(records))
    print(vocab_line)
    if args.out:
        atomic_write_json(args.out, records)
        print(f"wrote {args.out}")
    return 0
