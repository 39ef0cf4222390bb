"""`depthattn serve`: an OpenAI-compatible HTTP server for a saved model folder.

transformers' own server (`transformers serve`, the `transformers[serving]` extra) answers the requests, schedules
them (one at a time, or with `--continuous-batching` a paged KV cache shared by all) and generates; this module
checks the folder, pins the server to it, and checks each generation request first, so that a bad one gets a 4xx
answer that names the problem instead of a 500 from inside generation.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys

from .evaluate.loading import check_saved_model, resolve_device
from .ops import DEPTH_IMPLS

GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions")


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
    from transformers.utils.import_utils import is_serve_available

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
    serve = _build_server(args)
    served = serve._model_manager.loaded_models[args.model]
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
        serve._generation_state.shutdown()
        serve.reset_loaded_models()
    return 0


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


def _build_server(args):
    """transformers' `Serve` pinned to the folder, with its model loaded and its app built but not started."""
    from transformers.cli.serve import Serve

    class BuiltServe(Serve):
        def start_server(self):  # `non_blocking` builds without running; `run` adds the checks, then runs it
            pass

    return BuiltServe(args.model, continuous_batching=args.continuous_batching, compile=args.compile,
                      device=args.device, cb_num_blocks=args.cb_num_blocks, host=args.host, port=args.port,
                      non_blocking=True)


class BadRequest(ValueError):
    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


class RequestChecks:
    """ASGI middleware in front of transformers' app: checks the JSON body of each generation request, answers a
    bad one with an OpenAI-style error, and passes a good one on, with `max_tokens` set to the room left in the
    model's context when the request leaves it out (as vLLM does)."""

    def __init__(self, app, model_name: str, tokenizer, context_length: int):
        self.app, self.model_name, self.tokenizer, self.context_length = app, model_name, tokenizer, context_length

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_ROUTES:
            return await self.app(scope, receive, send)
        raw, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw, more = raw + message.get("body", b""), message.get("more_body", False)
        try:
            body = self.checked(scope["path"], raw)
        except BadRequest as error:
            return await _error_response(error)(scope, receive, send)

        replayed = False

        async def replay():  # the checked body once, then the client's own messages (a disconnect)
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

        await self.app(scope, replay, send)

    def checked(self, route: str, raw: bytes) -> dict:
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise BadRequest(f"the request body is not valid JSON: {error}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if body.get("model", self.model_name) != self.model_name:
            raise BadRequest(f"model {body['model']!r} is not served here; this server serves {self.model_name!r} "
                             "(GET /v1/models)", "model", status=404)
        for name in ("max_tokens", "max_completion_tokens"):
            _check_number(body, name, low=1, integer=True)
        _check_number(body, "temperature", low=0, hint=" (0: greedy)")
        _check_number(body, "top_p", low=0, high=1, open_low=True)
        if body.get("n", 1) != 1:
            raise BadRequest(f"n must be 1 (one choice per request), got {body['n']!r}", "n")
        if not isinstance(body.get("stream", False), bool):
            raise BadRequest(f"stream must be true or false, got {body['stream']!r}", "stream")

        prompt_tokens = self.count_prompt_tokens(route, body)
        room = self.context_length - prompt_tokens
        context = f"the model's context of {self.context_length} tokens (max_position_embeddings)"
        if room < 1:
            raise BadRequest(f"the prompt is {prompt_tokens} tokens, which leaves no room in {context}: "
                             "shorten the prompt", "messages" if route.endswith("chat/completions") else "prompt")
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked is None:
            body["max_tokens"] = room
        elif asked > room:
            raise BadRequest(f"the prompt is {prompt_tokens} tokens and {asked} more are asked for, beyond {context}: "
                             f"ask for at most {room} or shorten the prompt", "max_tokens")
        return body

    def count_prompt_tokens(self, route: str, body: dict) -> int:
        if route == "/v1/completions":
            prompt = body.get("prompt", "")
            if not isinstance(prompt, str):
                raise BadRequest("prompt must be a string (one prompt per request)", "prompt")
            return len(self.tokenizer(prompt).input_ids)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise BadRequest('messages must be a non-empty list of {"role": ..., "content": ...} objects', "messages")
        if self.tokenizer.chat_template is None:
            raise BadRequest("this model's tokenizer has no chat template: use /v1/completions with a prompt",
                             "messages")
        from transformers.cli.serving.utils import BaseHandler, Modality

        try:  # as transformers' chat handler formats them
            ids = self.tokenizer.apply_chat_template(
                BaseHandler.get_processor_inputs_from_messages(messages, Modality.LLM), add_generation_prompt=True,
                tools=body.get("tools"), tokenize=True, return_dict=True, **body.get("chat_template_kwargs", {}),
            )["input_ids"]
        except Exception as error:  # the template's own message (a jinja error, a missing field)
            raise BadRequest(f"the chat template cannot format these messages: {error}", "messages") from None
        return len(ids)


def _check_number(body: dict, name: str, low: float, high: float = math.inf, integer: bool = False,
                  open_low: bool = False, hint: str = ""):
    value = body.get(name)
    if value is None:
        return
    number = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or (value <= low if open_low else value < low) or value > high:
        bounds = (f"> {low}" if open_low else f">= {low}") + (f" and <= {high}" if high < math.inf else "")
        raise BadRequest(f"{name} must be {'an integer' if integer else 'a number'} {bounds}{hint}, got {value!r}",
                         name)


def _error_response(error: BadRequest):
    from starlette.responses import JSONResponse

    kind = "not_found_error" if error.status == 404 else "invalid_request_error"
    return JSONResponse({"error": {"message": str(error), "type": kind, "param": error.param, "code": None}},
                        status_code=error.status)
