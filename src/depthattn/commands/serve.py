"""`depthattn serve`: an OpenAI-compatible HTTP server for a saved model folder (transformers' server, pinned to
the folder, with request checks): its options; the server is depthattn.serving.app.serve."""

from __future__ import annotations

import argparse
import dataclasses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder saved by train, with its tokenizer "
                                      "(e.g. runs/demo/depth_attention/final)")
    parser.add_argument("--host", default="localhost", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default %(default)s)")
    parser.add_argument("--served-model-name", metavar="NAME",
                        help="the model name /v1/models lists and requests may send (default: the folder as given; "
                             "the folder as given and its resolved path are accepted too)")
    parser.add_argument("--continuous-batching", action="store_true",
                        help="serve concurrent requests together from a paged KV cache (transformers' continuous "
                             "batching); sampling settings are the model's generation config")
    parser.add_argument("--cb-max-sequences", type=int, default=8, metavar="N",
                        help="continuous batching: sequences the paged cache holds at once, each of the model's "
                             "whole context (default %(default)s)")
    parser.add_argument("--cb-num-blocks", type=int, metavar="N",
                        help="continuous batching: paged cache blocks of 256 tokens (default: from --cb-max-sequences)")
    parser.add_argument("--cb-memory-gb", type=float, default=2.0, metavar="GB",
                        help="continuous batching: the most memory the paged cache may take (default %(default)s)")
    parser.add_argument("--shutdown-grace", type=float, default=10.0, metavar="SECONDS",
                        help="on SIGTERM: how long running requests may go on before they are ended "
                             "(default %(default)s)")
    parser.add_argument("--compile", action="store_true",
                        help="a static KV cache per request, whose decoding steps transformers compiles on a GPU")
    parser.add_argument("--context-length", type=int, metavar="N",
                        help="longest prompt plus completion in tokens (default: the training seq_len from "
                             "train_config.json in or above the folder, else max_position_embeddings)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--method-field", action="append", default=[], metavar="NAME=VALUE",
                        help="how the method computes, over the saved config (repeatable; a field of its "
                             "switchable_fields, e.g. depth_impl=cpu: Depth-Attention's C++ kernel, for CPU serving)")


def run(args) -> int:
    from ..loading import parse_method_fields, quiet_loading_bars
    from ..serving.app import ServeOptions, serve

    quiet_loading_bars()
    given = {field.name: getattr(args, field.name) for field in dataclasses.fields(ServeOptions)
             if field.name != "method_fields"}
    return serve(args.model, ServeOptions(**given, method_fields=parse_method_fields(args.method_field)))
