"""The internals of transformers' server (`transformers serve`, the `transformers[serving]` extra) that `depthattn
serve` uses, each saying which public API is missing, as depthattn/compat.py does for the rest of transformers. A
transformers upgrade that moves one of them breaks tests/test_compat.py and tests/test_serve.py, not a server."""

from __future__ import annotations

import copy

from transformers.utils.import_utils import is_serve_available


def serve_available() -> bool:
    """Whether the `transformers[serving]` extra is installed (transformers' own check is in `import_utils`)."""
    return is_serve_available()


def transformers_server(model: str, **options):
    """transformers' server (`transformers serve`) pinned to the folder `model`, with its model loaded and its app
    built but not started. `Serve` is the command's class: there is no public API that builds the app without
    running it, so `start_server` becomes a no-op and the caller runs the app itself."""
    from transformers.cli.serve import Serve

    class BuiltServe(Serve):
        def start_server(self):
            pass

    return BuiltServe(model, non_blocking=True, **options)


def chat_processor_inputs(messages: list[dict]):
    """The chat messages as transformers' server hands them to `apply_chat_template` (text only), so a request is
    checked exactly as it will be formatted; the handler's helper is internal."""
    from transformers.cli.serving.utils import BaseHandler, Modality

    return BaseHandler.get_processor_inputs_from_messages(messages, Modality.LLM)


def ignored_fields(route: str) -> frozenset[str]:
    """The OpenAI fields transformers' handler for `route` accepts and ignores (with a log line only): the handlers'
    sets are internal."""
    if route.endswith("/chat/completions"):
        from transformers.cli.serving.chat_completion import ChatCompletionHandler as handler
    else:
        from transformers.cli.serving.completion import CompletionHandler as handler
    return frozenset(handler._unused_fields)


def served_model(serve, name: str):
    """The (model, processor) entry `transformers serve` loaded for `name`; its model manager is private. Its key
    is the name as `process_model_name` spells it: a local folder `folder@main` in 5.19, `folder` in 5.24."""
    manager = serve._model_manager
    return manager.loaded_models[manager.process_model_name(name)]


def start_cb_worker(serve, model_id: str, model) -> None:
    """Start the continuous-batching worker now, allocating its paged cache, instead of at the first request; its
    generation state is private. The worker's shared sampling settings are then the model's generation config. It
    goes under the name the requests' handlers use (`process_model_name`): under another, the first request would
    replace it."""
    model_id = serve._model_manager.process_model_name(model_id)
    manager = serve._generation_state.get_manager(model_id, use_cb=True)
    manager.init_cb(model, copy.deepcopy(model.generation_config))


def cb_worker_error(serve) -> str | None:
    """Why the continuous-batching worker died, or None while it runs (or before it starts)."""
    manager = serve._generation_state._cb_manager
    if manager is None or manager.is_alive():
        return None
    return str(manager._cb.background_thread_status.fatal_error)


def stop_generation(serve) -> None:
    """Stop the server's generation worker (continuous batching's thread); its state object is private."""
    serve._generation_state.shutdown()
