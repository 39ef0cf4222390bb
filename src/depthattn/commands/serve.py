"""`depthattn serve`: an OpenAI-compatible HTTP server for a saved model folder (transformers' server, pinned to
the folder, with request checks: depthattn.serve)."""

from __future__ import annotations

import argparse
import signal
import sys

from transformers.utils.import_utils import is_serve_available

from ..compat import served_model, stop_generation
from ..loading import check_saved_model, resolve_device
from ..ops import DEPTH_IMPLS
from ..serve import RequestChecks, build_server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder saved by train, with its tokenizer "
                                      "(e.g. runs/demo/depth_attention/final)")
    parser.add_argument("--host", default="localhost", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default %(default)s)")
    parser.add_argument("--continuous-batching", action="store_true",
                        help="serve concurrent requests together from a paged KV cache (transformers' continuous "
                             "batching); sampling settings are those of the first request")
    parser.add_argument("--cb-num-blocks", type=int, metavar="N",
                        help="KV cache blocks for continuous batching (default: sized from free memory)")
    parser.add_argument("--compile", action="store_true",
                        help="a static KV cache per request, whose decoding steps transformers compiles on a GPU")
    parser.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--depth-impl", choices=DEPTH_IMPLS,
                        help="the depth mixing implementation, over the saved config's (e.g. cpu: the C++ kernel, "
                             "for CPU serving)")


def run(args) -> int:
    path = check_saved_model(args.model)
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise FileNotFoundError(f"{path} holds no tokenizer; copy tokenizer.json and tokenizer_config.json of the "
                                "prepared dataset the model was trained on (its tokenizer/ folder) into it")
    if args.device != "auto":
        resolve_device(args.device)
    if args.cb_num_blocks is not None and args.cb_num_blocks < 1:
        raise ValueError(f"--cb-num-blocks must be >= 1, got {args.cb_num_blocks}")
    if not is_serve_available():
        raise ImportError('depthattn serve needs the serve extra: pip install "depthattn[serve]"')

    # uvicorn ends gracefully on SIGTERM and then raises the signal again with the handler it found: this one
    signal.signal(signal.SIGTERM, _exit_cleanly)
    serve = build_server(args.model, continuous_batching=args.continuous_batching, compile=args.compile,
                         device=args.device, cb_num_blocks=args.cb_num_blocks, host=args.host, port=args.port)
    served = served_model(serve, args.model)
    if args.depth_impl is not None:
        served.model.set_depth_impl(args.depth_impl)
        print(f"depthattn serve: depth mixing through depth_impl={args.depth_impl!r}", file=sys.stderr, flush=True)
    app = serve.server.config.app
    app.add_middleware(RequestChecks, model_name=args.model, tokenizer=served.processor,
                       context_length=served.model.config.max_position_embeddings)
    try:
        serve.server.run()
    except KeyboardInterrupt:
        return 130
    finally:
        stop_generation(serve)
        serve.reset_loaded_models()
    return 0


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


