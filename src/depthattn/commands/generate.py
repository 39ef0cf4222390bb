"""`depthattn generate`: continue a prompt with a saved model."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder saved by train: final/ or checkpoints/step_* "
                                      "(e.g. runs/demo/depth_attention/final)")
    parser.add_argument("prompt", help='the text to continue; "" starts a new document')
    parser.add_argument("--max-new-tokens", type=int, default=64, help="(default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="sampling temperature; 0 for greedy decoding (default %(default)s)")
    parser.add_argument("--top-k", type=int, default=50,
                        help="sample among the k likeliest tokens; 0: no limit (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed (default %(default)s)")
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the model folder's)")
    parser.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                        help="torch.compile the decoding steps (static KV cache; backend default inductor)")
    parser.add_argument("--method-field", action="append", default=[], metavar="NAME=VALUE",
                        help="how the method computes, over the saved config (repeatable; a field of its "
                             "switchable_fields, e.g. depth_impl=cpu: Depth-Attention's C++ kernel for eager CPU "
                             "decoding, built on first use)")


def run(args: argparse.Namespace) -> int:
    from ..loading import parse_method_fields, quiet_loading_bars
    from ..serving.generation import generate_text

    quiet_loading_bars()
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes the terminal's encoding could not decode reach Python as lone surrogates
        raise ValueError("the prompt is not valid UTF-8 text; pass it in UTF-8") from None
    print(generate_text(args.model, args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed,
                        args.tokenizer, args.compile, parse_method_fields(args.method_field)))
    return 0
