"""`depthattn serve`: an OpenAI-compatible HTTP server for a saved model folder (transformers' server, pinned to
the folder, with request checks: depthattn.serving.server)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from ..config import METHODS, DepthAttentionConfig
from ..serving.cache import paged_cache_bytes, paged_cache_config


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


def paged_cache_blocks(args, config: DepthAttentionConfig) -> int:
    """The paged cache's blocks, from --cb-num-blocks or --cb-max-sequences, within --cb-memory-gb."""
    if args.cb_max_sequences < 1 or (args.cb_num_blocks is not None and args.cb_num_blocks < 1):
        raise ValueError(f"--cb-max-sequences and --cb-num-blocks must be >= 1, got {args.cb_max_sequences} and "
                         f"{args.cb_num_blocks}")
    paged = paged_cache_config(config, args.cb_max_sequences)
    if args.cb_num_blocks is not None:
        paged.num_blocks = args.cb_num_blocks
    gigabytes = paged_cache_bytes(config, paged) / 2**30
    if gigabytes > args.cb_memory_gb:
        raise ValueError(f"a paged KV cache of {paged.num_blocks} blocks takes {gigabytes:.2f} GB, over "
                         f"--cb-memory-gb {args.cb_memory_gb:g}: lower --cb-max-sequences or --cb-num-blocks, or "
                         "raise --cb-memory-gb")
    return paged.num_blocks


def served_context(path: Path, max_positions: int, asked: int | None) -> tuple[int, str, str | None]:
    """(context length, where it comes from, a warning or None): --context-length when given (at most
    max_position_embeddings), else the training seq_len when train_config.json gives it, else max_positions."""
    from ..loading import default_context_length

    trained = default_context_length(path, max_positions)
    if asked is None:
        origin = "the training seq_len" if trained < max_positions else "max_position_embeddings"
        return trained, origin, None
    if not 1 <= asked <= max_positions:
        raise ValueError(f"--context-length must be between 1 and the model's max_position_embeddings "
                         f"({max_positions}), got {asked}")
    warning = None if asked <= trained else (
        f"--context-length {asked} is beyond the {trained} tokens the model was trained on (train_config.json): "
        "text past them is extrapolation, usually worse")
    return asked, "--context-length", warning


def run(args) -> int:
    from ..compat import serve_available, served_model, start_cb_worker, stop_generation
    from ..loading import check_saved_model, parse_method_fields, resolve_device
    from ..serving.server import RequestChecks, build_server

    path = check_saved_model(args.model)
    method_fields = parse_method_fields(args.method_field)
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise FileNotFoundError(f"{path} holds no tokenizer; copy tokenizer.json and tokenizer_config.json of the "
                                "prepared dataset the model was trained on (its tokenizer/ folder) into it")
    if args.device != "auto":
        resolve_device(args.device)
    if args.shutdown_grace < 0:
        raise ValueError(f"--shutdown-grace must be >= 0 seconds, got {args.shutdown_grace}")
    if not serve_available():
        raise ImportError('depthattn serve needs the serve extra: pip install "depthattn[serve]"')
    config = DepthAttentionConfig.from_pretrained(path)
    refusal = METHODS[config.cross_layer].packed_refusal
    if args.continuous_batching and refusal:
        raise ValueError(f"--continuous-batching: {refusal}")
    blocks = paged_cache_blocks(args, config) if args.continuous_batching else None
    context_length, context_origin, warning = served_context(path, config.max_position_embeddings,
                                                             args.context_length)
    if warning:
        print(f"depthattn serve: warning: {warning}", file=sys.stderr, flush=True)

    # uvicorn ends gracefully on SIGTERM and then raises the signal again with the handler it found: this one
    signal.signal(signal.SIGTERM, _exit_cleanly)
    serve = build_server(args.model, continuous_batching=args.continuous_batching, compile=args.compile,
                         device=args.device, cb_num_blocks=blocks, host=args.host, port=args.port)
    served = served_model(serve, args.model)
    for name, value in method_fields.items():
        served.model.switch_method_field(name, value)
        print(f"depthattn serve: cross_layer={config.cross_layer!r} computes with {name}={value!r}", file=sys.stderr,
              flush=True)
    try:
        if args.continuous_batching:  # the paged cache now: a failure is a startup error, not a broken server
            try:
                start_cb_worker(serve, args.model, served.model)
            except (RuntimeError, MemoryError) as error:
                raise RuntimeError(f"could not allocate the paged KV cache of {blocks} blocks: {error}; lower "
                                   "--cb-max-sequences or --cb-num-blocks") from None
        names = {args.served_model_name or args.model, args.model, str(Path(args.model).resolve())}
        app = serve.server.config.app
        app.add_middleware(RequestChecks, model_id=args.model, model_names=names,
                           listed_name=args.served_model_name or args.model, tokenizer=served.processor,
                           context_length=context_length, context_origin=context_origin)
        print(f"depthattn serve: {args.model} with a context of {context_length} tokens ({context_origin}; "
              f"max_position_embeddings {config.max_position_embeddings})", file=sys.stderr, flush=True)
        serve.server.config.timeout_graceful_shutdown = args.shutdown_grace
        died = _watch_generation_worker(serve) if args.continuous_batching else threading.Event()
        serve.server.run()
    except KeyboardInterrupt:
        return 130
    finally:
        stop_generation(serve)
        serve.reset_loaded_models()
    return 1 if died.is_set() else 0


def _watch_generation_worker(serve, every_s: float = 0.5) -> threading.Event:
    """If the continuous-batching worker dies, say so and stop the server, which then exits with status 1 (a
    supervisor restarts it); meanwhile /health answers 503. Never a server that lists models while every
    generation fails."""
    from ..compat import cb_worker_error

    died = threading.Event()

    def watch():
        while not serve.server.should_exit:
            error = cb_worker_error(serve)
            if error is not None:
                print(f"depthattn serve: the generation worker died ({error}); stopping, exit status 1",
                      file=sys.stderr, flush=True)
                died.set()
                serve.server.should_exit = True
                return
            died.wait(every_s)

    threading.Thread(target=watch, name="generation-watchdog", daemon=True).start()
    return died


def _exit_cleanly(signum, frame):
    raise SystemExit(0)
