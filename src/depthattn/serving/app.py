"""`depthattn serve`'s server from start to exit: the folder checked, transformers' server built on it, the method's
fields switched, the continuous-batching worker started and watched, every request checked (`server.RequestChecks`),
and SIGTERM ending it gracefully."""

from __future__ import annotations

import dataclasses
import math
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from ..config import DepthAttentionConfig
from ..loading import check_saved_model, check_shapes_fit, default_context_length, load_config, resolve_device
from ..methods import DESCRIPTIONS
from ..modeling import check_method_switch
from .cache import paged_cache_bytes, paged_cache_config
from .server import RequestChecks, SharedSampling
from .transformers_serve import serve_available, stop_strings_failure, transformers_server


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How to serve a folder: `depthattn serve`'s options (docs/serving.md), which give their defaults."""

    host: str
    port: int
    served_model_name: str | None  # the name /v1/models lists (None: the folder as given)
    continuous_batching: bool
    cb_max_sequences: int
    cb_num_blocks: int | None
    cb_memory_gb: float
    shutdown_grace: float  # seconds running requests may go on after SIGTERM
    compile: bool
    context_length: int | None  # None: the training seq_len, else max_position_embeddings
    device: str
    method_fields: Mapping[str, object]  # fields of the method's switchable_fields, over the saved config's


def serve(folder: str, options: ServeOptions) -> int:
    """Serve the model folder `folder` until SIGTERM (exit status 0) or Ctrl-C (130); 1 when the continuous-batching
    worker died. Raises ValueError, FileNotFoundError, ImportError or RuntimeError, naming the fix, before serving."""
    path, config = _check_before_loading(folder, options)
    context_length, context_origin, warning = served_context(path, config.max_position_embeddings,
                                                             options.context_length)
    blocks = paged_cache_blocks(options, config, context_length) if options.continuous_batching else None
    if warning:
        _say(f"warning: {warning}")

    # uvicorn ends gracefully on SIGTERM and then raises the signal again with the handler it found: this one
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        server = transformers_server(folder, options.method_fields, options.continuous_batching, options.compile,
                                     options.device, blocks, options.host, options.port)
    except (RuntimeError, MemoryError) as error:
        if not options.continuous_batching:
            raise
        # the paged cache is allocated now: a failure is a startup error, not a broken server
        raise RuntimeError(f"could not start the model with a paged KV cache of {blocks} blocks: {error}; lower "
                           "--cb-max-sequences or --cb-num-blocks") from None
    try:
        for name, value in options.method_fields.items():
            _say(f"cross_layer={config.cross_layer!r} computes with {name}={value!r}")
        shared = SharedSampling.of(server.generation_config) if options.continuous_batching else None
        if shared is None:
            sample_per_request(server.generation_config)
        names = {options.served_model_name or folder, folder, str(Path(folder).resolve())}
        server.uvicorn.config.app.add_middleware(
            RequestChecks, model_id=folder, model_names=names, listed_name=options.served_model_name or folder,
            tokenizer=server.processor, context_length=context_length, context_origin=context_origin,
            shared_sampling=shared, stop_strings_failure=stop_strings_failure(server.processor) if shared is None
            else None)
        _say(f"{folder} with a context of {context_length} tokens ({context_origin}; max_position_embeddings "
             f"{config.max_position_embeddings})")
        server.uvicorn.config.timeout_graceful_shutdown = options.shutdown_grace
        died = _watch_generation_worker(server)
        server.uvicorn.run()
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()
    return 1 if died.is_set() else 0


def sample_per_request(generation_config) -> None:
    """Requests sample as the OpenAI API says: by their temperature (0: greedy) and top_p, which default to the
    folder's generation_config.json and else to 1, with no top-k (the API has none; transformers' default is 50).
    transformers' server turns sampling off at temperature 0 but never on, so it is on here."""
    generation_config.do_sample = True
    if generation_config.top_k is None:
        generation_config.top_k = 0


def _check_before_loading(folder: str, options: ServeOptions) -> tuple[Path, DepthAttentionConfig]:
    """The folder and the options checked, and the folder's config, before transformers' server loads the model:
    a mistake is one line naming it, not a traceback or uvicorn's errno after loading."""
    path = check_saved_model(folder)
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise FileNotFoundError(f"{path} holds no tokenizer; copy tokenizer.json and tokenizer_config.json of the "
                                "prepared dataset the model was trained on (its tokenizer/ folder) into it")
    if options.device != "auto":
        resolve_device(options.device)
    if options.shutdown_grace < 0:
        raise ValueError(f"--shutdown-grace must be >= 0 seconds, got {options.shutdown_grace}")
    check_address(options.host, options.port)
    if not serve_available():
        raise ImportError('depthattn serve needs the serve extra: pip install "depthattn[serve]"')
    config = load_config(path)
    check_shapes_fit(path)  # the weights' files, before transformers' server loads them
    for name, value in options.method_fields.items():
        check_method_switch(config, name, value)
    refusal = DESCRIPTIONS[config.cross_layer].packed_refusal
    if options.continuous_batching and refusal:
        raise ValueError(f"--continuous-batching: {refusal}")
    return path, config


def check_address(host: str, port: int) -> None:
    """That the server can listen on `host`:`port`, before the model is loaded: a port in range and free, a host
    this machine has (uvicorn's own error would come only after loading, as a bare errno)."""
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be 0 to 65535, got {port}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:  # as uvicorn binds
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as error:
            raise ValueError(f"--host {host!r} is not an address ({error.strerror}); use localhost, 0.0.0.0 (every "
                             "interface) or an address of this machine") from None
        except OSError as error:
            raise ValueError(f"cannot listen on {host}:{port} ({error.strerror}): another server may hold the "
                             "port, or the address is not this machine's; pick another --port or --host") from None


def paged_cache_blocks(options: ServeOptions, config: DepthAttentionConfig, context: int) -> int:
    """The paged cache's blocks, from --cb-num-blocks or --cb-max-sequences, within --cb-memory-gb, and room for
    one request of the served `context` (a request the cache cannot hold stops the batching worker)."""
    if options.cb_max_sequences < 1 or (options.cb_num_blocks is not None and options.cb_num_blocks < 1):
        raise ValueError(f"--cb-max-sequences and --cb-num-blocks must be >= 1, got {options.cb_max_sequences} and "
                         f"{options.cb_num_blocks}")
    paged = paged_cache_config(config, options.cb_max_sequences)
    if options.cb_num_blocks is not None:
        needed = math.ceil(context / paged.page_size)
        if options.cb_num_blocks < needed:
            raise ValueError(f"--cb-num-blocks {options.cb_num_blocks} holds {options.cb_num_blocks * paged.page_size} "
                             f"tokens, less than one request of the served context of {context} tokens: give at "
                             f"least {needed}, or serve a shorter --context-length")
        paged.num_blocks = options.cb_num_blocks
    gigabytes = paged_cache_bytes(config, paged) / 2**30
    if gigabytes > options.cb_memory_gb:
        raise ValueError(f"a paged KV cache of {paged.num_blocks} blocks takes {gigabytes:.2f} GB, over "
                         f"--cb-memory-gb {options.cb_memory_gb:g}: lower --cb-max-sequences or --cb-num-blocks, or "
                         "raise --cb-memory-gb")
    return paged.num_blocks  # type: ignore[return-value]  # paged_cache_bytes refused a None above


def served_context(path: Path, max_positions: int, asked: int | None) -> tuple[int, str, str | None]:
    """(context length, where it comes from, a warning or None): --context-length when given (at most
    max_position_embeddings), else the training seq_len when train_config.json gives it, else max_positions."""
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


def _watch_generation_worker(server, every_s: float = 0.5) -> threading.Event:
    """If generation can no longer run (the continuous-batching worker, or the model's own process, died), say so and
    stop the server, which then exits with status 1 (a supervisor restarts it); meanwhile /health answers 503. Never
    a server that lists models while every generation fails."""
    died = threading.Event()

    def watch():
        while not server.uvicorn.should_exit:
            error = server.worker_error()
            if error is not None:
                _say(f"the generation worker died ({error}); stopping, exit status 1")
                died.set()
                server.uvicorn.should_exit = True
                return
            died.wait(every_s)

    threading.Thread(target=watch, name="generation-watchdog", daemon=True).start()
    return died


def _say(line: str) -> None:
    print(f"depthattn serve: {line}", file=sys.stderr, flush=True)


def _exit_cleanly(signum, frame):
    raise SystemExit(0)
