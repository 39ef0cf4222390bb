"""The internals of transformers' server (`transformers serve`, the `transformers[serving]` extra) that `depthattn
serve` uses, each saying which public API is missing, as depthattn/compat.py does for the rest of transformers. A
transformers upgrade that moves one of them breaks tests/test_compat.py and tests/test_serve.py, not a server.

Two shapes of that server are supported:
- up to 5.24, `Serve(non_blocking=True)` loads the model in this process and builds its app without running it;
- from 5.25, `Serve.__init__` runs the server at once, and the model lives in a process of its own (the engine),
  which loads it with a copy of the server's `ModelLoader`: the app is built here from the same parts `Serve.run`
  builds it from, and the method's fields are switched in the engine by a loader of ours (`engine_loader.py`).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from transformers import ContinuousBatchingConfig, StoppingCriteriaList, StopStringCriteria
from transformers.utils.import_utils import is_serve_available


def serve_available() -> bool:
    """Whether the `transformers[serving]` extra is installed (transformers' own check is in `import_utils`)."""
    return is_serve_available()


@dataclass
class TransformersServer:
    """transformers' server pinned to one folder, its model loaded, its app built but not running."""

    uvicorn: Any  # uvicorn.Server: `.config.app` takes middleware, `.run()` serves, `.should_exit` stops it
    processor: object  # the tokenizer requests are checked with, as the handlers tokenize them
    generation_config: object  # what requests generate with, on top of their own fields
    worker_error: Callable[[], str | None]  # why generation can no longer run, or None while it can
    stop: Callable[[], None]  # stop generating and free the model


def engine_in_own_process() -> bool:
    """Whether transformers' server runs the model in a process of its own (5.25 on), not in the server's."""
    from transformers.cli.serve import Serve

    return "non_blocking" not in inspect.signature(Serve.__init__).parameters


def transformers_server(folder: str, method_fields: Mapping[str, object], continuous_batching: bool, compile: bool,
                        device: str, cb_num_blocks: int | None, host: str, port: int) -> TransformersServer:
    """transformers' server pinned to `folder`, its model loaded with `method_fields` switched (and with continuous
    batching its paged cache allocated), its app built but not started."""
    build = _engine_server if engine_in_own_process() else _in_process_server
    return build(folder, dict(method_fields), continuous_batching, compile, device, cb_num_blocks, host, port)


def _in_process_server(folder, method_fields, continuous_batching, compile, device, cb_num_blocks, host, port):
    """Up to 5.24: `Serve` is the command's class, and there is no public API that builds the app without running
    it, so `start_server` becomes a no-op and the caller runs the app itself."""
    from transformers.cli.serve import Serve as ServeUpTo524

    serve_class: Any = ServeUpTo524  # mypy reads the installed release's Serve, not the one this branch runs on

    class BuiltServe(serve_class):
        def start_server(self):
            pass

    serve = BuiltServe(folder, non_blocking=True, continuous_batching=continuous_batching, compile=compile,
                       device=device, cb_num_blocks=cb_num_blocks, host=host, port=port)
    # the loaded (model, processor); the model manager is private, and its key is the name as `process_model_name`
    # spells it: a local folder `folder@main` in 5.19, `folder` in 5.24
    manager = serve._model_manager
    model_id = manager.process_model_name(folder)
    served = manager.loaded_models[model_id]
    for name, value in method_fields.items():
        served.model.switch_method_field(name, value)
    stop_in_answers_only(served.model)
    if continuous_batching:  # the worker now, allocating its paged cache, instead of at the first request; under
        # the name the requests' handlers use, or the first request would replace it. Its generation state is private.
        serve._generation_state.get_manager(model_id, use_cb=True).init_cb(
            served.model, copy.deepcopy(served.model.generation_config))

    def worker_error():
        cb = serve._generation_state._cb_manager
        return None if cb is None or cb.is_alive() else str(cb._cb.background_thread_status.fatal_error)

    def stop():
        serve._generation_state.shutdown()
        serve.reset_loaded_models()

    return TransformersServer(serve.server, served.processor, served.model.generation_config, worker_error, stop)


def _engine_server(folder, method_fields, continuous_batching, compile, device, cb_num_blocks, host, port):
    """From 5.25: the parts `Serve.run` builds its app from (their classes are internal), the model's process
    started at once (`force_model`), with continuous batching its batching manager too."""
    import uvicorn
    from transformers.cli.serving.chat_completion import ChatCompletionHandler
    from transformers.cli.serving.completion import CompletionHandler
    from transformers.cli.serving.model_manager import ModelManager
    from transformers.cli.serving.response import ResponseHandler
    from transformers.cli.serving.server import build_server
    from transformers.cli.serving.systemone import SystemOneHandler
    from transformers.cli.serving.transcription import TranscriptionHandler
    from transformers.cli.serving.utils import GenerationState

    from .engine_loader import MethodFieldsLoader

    cb_config = None if cb_num_blocks is None else ContinuousBatchingConfig(num_blocks=cb_num_blocks)
    state = GenerationState(continuous_batching=continuous_batching, compile=compile, cb_config=cb_config)
    loader = MethodFieldsLoader(method_fields, device=device, continuous_batching=continuous_batching)
    manager = ModelManager(loader, state, model_timeout=-1, force_model=folder)
    shared: dict[str, Any] = dict(model_manager=manager, generation_state=state)
    app = build_server(manager, ChatCompletionHandler(**shared, chat_template_kwargs={}),
                       completion_handler=CompletionHandler(**shared),
                       response_handler=ResponseHandler(**shared, chat_template_kwargs={}),
                       transcription_handler=TranscriptionHandler(manager),
                       systemone_handler=SystemOneHandler(**shared, chat_template_kwargs={}, decision_config=None))
    engine = manager.get_engine(folder)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info"))

    def worker_error():
        return (engine.fatal_error or "the model's process stopped") if manager.is_dead else None

    return TransformersServer(server, engine.processor, engine.generation_config, worker_error, manager.shutdown)


def chat_processor_inputs(messages: list[dict]):
    """The chat messages as transformers' server hands them to `apply_chat_template` (text only), so a request is
    checked exactly as it will be formatted; the handler's helper is internal."""
    from transformers.cli.serving.utils import BaseHandler, Modality

    return BaseHandler.get_processor_inputs_from_messages(messages, Modality.LLM)


class AnswerStopStrings(StopStringCriteria):
    """transformers' stop strings over the generated tokens only: OpenAI's `stop` ends an answer that contains one,
    and one spelt by the prompt's end and the answer's start does not count (transformers' own criterion reads the
    prompt too, so a prompt ending in "\n" stopped at once on a first token starting with "\n", for "\n\n")."""

    def __init__(self, tokenizer, stop_strings, prompt_length: int):
        super().__init__(tokenizer, stop_strings)
        self.prompt_length = prompt_length

    def __call__(self, input_ids, scores, **kwargs):
        return super().__call__(input_ids[:, self.prompt_length:], scores, **kwargs)


def stop_in_answers_only(model) -> None:
    """`model.generate` with `stop_strings` (what transformers' handlers pass for a request's `stop`) matching them
    in the answer alone (`AnswerStopStrings`)."""
    generate = model.generate

    def generate_with_answer_stops(*args, stop_strings=None, stopping_criteria=None, **kwargs):
        if stop_strings is not None and "input_ids" in kwargs:
            stops = [stop_strings] if isinstance(stop_strings, str) else stop_strings
            answer_stops = AnswerStopStrings(kwargs["tokenizer"], stops, kwargs["input_ids"].shape[-1])
            stopping_criteria, stop_strings = StoppingCriteriaList([*(stopping_criteria or []), answer_stops]), None
        return generate(*args, stop_strings=stop_strings, stopping_criteria=stopping_criteria, **kwargs)

    model.generate = generate_with_answer_stops


def chat_tools(tools):
    """The request's tools as transformers' chat handler hands them to the template (5.25 nests the Responses
    API's flat ones; the helper is internal, and earlier releases pass them as they are)."""
    from transformers.cli.serving.utils import BaseHandler

    normalize = getattr(BaseHandler, "_normalize_tools", None)
    return normalize(tools) if normalize is not None else tools


def stop_strings_failure(tokenizer) -> str:
    """Why transformers' stop strings fail on `tokenizer`'s vocabulary ("" where they work): a word-level vocabulary
    without the probe word transformers decodes each token after fails so, for instance."""
    try:
        StopStringCriteria(tokenizer, ["\n"])
    except Exception as error:  # noqa: BLE001  (whatever the vocabulary's cleaning raises)
        return f"{type(error).__name__}: {error}"
    return ""


def ignored_fields(route: str) -> frozenset[str]:
    """The OpenAI fields transformers' handler for `route` accepts and ignores (with a log line only): the handlers'
    sets are internal."""
    from transformers.cli.serving.chat_completion import ChatCompletionHandler
    from transformers.cli.serving.completion import CompletionHandler

    handler = ChatCompletionHandler if route.endswith("/chat/completions") else CompletionHandler
    return frozenset(handler._unused_fields)
