"""An OpenAI-compatible HTTP server for a saved model folder (`depthattn serve`).

transformers' own server (`transformers serve`, the `transformers[serving]` extra) answers the requests, schedules
them (one at a time, or with `--continuous-batching` a paged KV cache shared by all) and generates; app.py pins it
to the folder and runs it; this module checks each generation request first, so that a bad one gets a 4xx answer
that names the problem instead of a 500 from inside generation.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections import Counter
from dataclasses import dataclass

from ..data.tokenizer import start_token_id
from .generation import MIN_TEMPERATURE
from .transformers_serve import chat_processor_inputs, chat_tools, ignored_fields, stop_strings_failure

GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions")
# what this server answers; transformers' app has more (/v1/responses, unchecked; /reset and /load_model, which
# unload the model for anyone who asks): those get a 404
SERVED_ROUTES = {("GET", "/health"), ("GET", "/v1/models"), *(("POST", route) for route in GENERATION_ROUTES)}
MAX_STOPS = 4  # as the OpenAI API
MAX_BODY_BYTES = 32 * 2**20  # a request's JSON: a prompt that fits a model's context is far smaller
# transformers' stop strings build a table (StopStringCriteria) and cache 8 of them: what a request's may cost at most
MAX_STOP_TABLE_BYTES = 128 * 2**20
TOKEN_ID = re.compile(r"[0-9]{1,9}")  # a logit_bias key (str.isdigit takes "²", which int() refuses)


def stop_table_bytes(vocab: int, stops: list[str]) -> int:
    """At most the bytes of the table transformers' StopStringCriteria builds for `stops`: int32, a row per token and,
    per stop string, a column for each place in it where a token's last character occurs (at most its most repeated
    character's count) and for each length by which a token may end it (at most its length)."""
    repeats = max(max(Counter(text).values()) for text in stops)
    return (vocab + 2) * (len(stops) * (repeats + max(map(len, stops))) + 1) * 4


class BadRequest(ValueError):
    """A request answered with an OpenAI-style error: 4xx for bad input, 500 for an internal failure."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.param, self.status, self.headers = param, status, headers


DONE = b"data: [DONE]"
# fields transformers ignores that change nothing at these values, or ever (user: an end-user id for the provider);
# a completion's logprobs is a count, and 0 still asks for the sampled tokens' logprobs
HARMLESS = {"n": (None, 1), "user": None, "presence_penalty": (None, 0), "stream_options": None,
            "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False), "best_of": (None, 1)}
HARMLESS_IN_COMPLETIONS = {**HARMLESS, "logprobs": (None,)}
# the chat template's arguments transformers' handler sets itself: a request's own would be passed twice
HANDLER_TEMPLATE_KWARGS = {"add_generation_prompt", "tools", "tokenize", "return_dict", "return_tensors",
                           "load_audio_from_video", "conversation"}


@dataclass(frozen=True)
class SharedSampling:
    """The sampling settings every request shares under continuous batching (transformers' worker takes one for
    the whole batch): the model folder's generation config. A request may leave them out or repeat them."""

    temperature: float  # 0: greedy
    top_p: float

    @classmethod
    def of(cls, generation_config) -> SharedSampling:
        if not generation_config.do_sample:
            return cls(0.0, 1.0)
        return cls(generation_config.temperature or 1.0, generation_config.top_p or 1.0)

    def check(self, body: dict) -> None:
        shared = ("greedy decoding" if self.temperature == 0 else
                  f"temperature {self.temperature:g}, top_p {self.top_p:g}")
        fix = (f"under --continuous-batching every request shares the sampling settings of the model's "
               f"generation_config.json ({shared}): leave {{field}} out, or serve without --continuous-batching for "
               "per-request sampling")
        temperature = body.get("temperature")
        if temperature is not None and temperature != self.temperature:
            raise BadRequest(f"temperature {temperature:g} cannot be honoured: {fix.format(field='temperature')}",
                             "temperature")
        top_p = body.get("top_p")
        if self.temperature > 0 and top_p is not None and top_p != self.top_p:
            raise BadRequest(f"top_p {top_p:g} cannot be honoured: {fix.format(field='top_p')}", "top_p")
        if self.temperature > 0 and body.get("seed") is not None:
            raise BadRequest(f"a seed cannot be honoured: {fix.format(field='seed')}", "seed")


class RequestChecks:
    """ASGI middleware in front of transformers' app: checks the JSON body of each generation request, answers a
    bad one with an OpenAI-style error, and passes a good one on, with `max_tokens` set to the room left in the
    model's context when the request leaves it out (as vLLM does) and an empty prompt starting a new document (as
    `depthattn generate` does). Requests may name the model by any of `model_names`; /v1/models lists
    `listed_name`, and so does every response's "model"; transformers' app sees `model_id`, the folder it loaded.
    Fields transformers would ignore are refused; with `shared_sampling` (continuous batching), so are sampling
    settings the batch cannot honour."""

    def __init__(self, app, model_id: str, model_names: set[str], listed_name: str, tokenizer, context_length: int,
                 context_origin: str = "max_position_embeddings", shared_sampling: SharedSampling | None = None,
                 stop_strings_failure: str | None = None):
        self.app, self.model_id, self.model_names, self.listed_name = app, model_id, model_names, listed_name
        self.tokenizer, self.context_length, self.context_origin = tokenizer, context_length, context_origin
        self.shared_sampling = shared_sampling
        # why stop strings fail on the vocabulary, "" where they work; None: found out at the first `stop` (probing
        # reads the whole vocabulary: `serve` does it before serving, not on the event loop)
        self.stop_strings_failure = stop_strings_failure
        self.start_text = tokenizer.convert_ids_to_tokens(start_token_id(tokenizer))

    async def __call__(self, scope, receive, send):  # noqa: C901  (one request's flow; its closures share its state)
        if scope["type"] == "http" and (scope["method"], scope["path"]) not in SERVED_ROUTES:
            return await _error_response(_not_served(scope["method"], scope["path"]))(scope, receive, send)
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/v1/models":
            return await self.models()(scope, receive, send)
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        raw, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            more = message.get("more_body", False)
            if len(raw) > MAX_BODY_BYTES:  # read no further: memory, and json.loads's time, grow with it
                return await _error_response(BadRequest(
                    f"the request body passes {MAX_BODY_BYTES // 2**20} MiB, more than any prompt this server takes "
                    "needs", status=413))(scope, receive, send)
        try:
            body = self.checked(scope["path"], bytes(raw))
        except BadRequest as error:
            return await _error_response(error)(scope, receive, send)

        replayed, started, error_status, error_body, streamed = False, False, None, b"", b""
        named = ResponseRewriter(self.model_id, self.listed_name, streaming=bool(body.get("stream")),
                                 stops=body.get("stop", ()))

        async def replay():  # the checked body once, then the client's own messages (a disconnect)
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

        async def tracked_send(message):  # transformers' own errors, e.g. {"error": "..."} with 503, in OpenAI's shape
            nonlocal started, error_status, error_body, streamed
            if message["type"] == "http.response.start" and message["status"] >= 400:
                error_status = message["status"]
            elif error_status is None:
                started = True
                if body.get("stream") and message["type"] == "http.response.body":
                    streamed = (streamed + message.get("body", b""))[-64:]
                    if not message.get("more_body") and DONE not in streamed:  # OpenAI's end of a stream
                        message = {**message, "body": message.get("body", b"") + DONE + b"\n\n"}
                for renamed in named(message):
                    await send(renamed)
            elif message["type"] == "http.response.body":
                error_body += message.get("body", b"")
                if not message.get("more_body"):
                    started = True
                    await _openai_error(error_status, error_body)(scope, receive, send)

        try:
            await self.app(scope, replay, tracked_send)
        except Exception as error:  # an internal failure: its own 500 with the message, if nothing was sent yet
            if started:
                raise
            failure = BadRequest(f"generation failed: {type(error).__name__}: {error}", status=500)
            await _error_response(failure)(scope, receive, send)

    def checked(self, route: str, raw: bytes) -> dict:
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise BadRequest(f"the request body is not valid JSON: {error}") from None
        except RecursionError:
            raise BadRequest("the request body nests JSON too deeply to read") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if not isinstance(body.get("model", self.model_id), str):
            raise BadRequest(f"model must be a string, the name of the served model ({self.listed_name!r}), got "
                             f"{reprlib.repr(body['model'])}", "model")
        if body.get("model", self.model_id) not in self.model_names:
            raise BadRequest(f"model {reprlib.repr(body['model'])} is not served here; this server serves "
                             f"{self.listed_name!r} (GET /v1/models)", "model", status=404)
        body["model"] = self.model_id
        self.check_fields(route, body)
        if self.shared_sampling is not None:
            self.shared_sampling.check(body)
        self.fit_to_context(route, body)
        return body

    def check_fields(self, route: str, body: dict) -> None:
        """The request's fields: each a value transformers takes and honours as the OpenAI API does, or a 4xx."""
        for name in ("max_tokens", "max_completion_tokens"):
            _check_number(body, name, low=1, integer=True)
        _check_number(body, "temperature", low=0, hint=" (0: greedy)")
        _check_number(body, "top_p", low=0, high=1, open_low=True)
        if body.get("n", 1) != 1:
            raise BadRequest(f"n must be 1 (one choice per request), got {reprlib.repr(body['n'])}", "n")
        if not isinstance(body.get("stream", False), bool):
            raise BadRequest(f"stream must be true or false, got {reprlib.repr(body['stream'])}", "stream")
        if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
            raise BadRequest(f"stream_options must be an object, got {reprlib.repr(body['stream_options'])}",
                             "stream_options")
        _check_number(body, "seed", low=0, high=2**64 - 1, integer=True)
        if body.get("temperature") and body["temperature"] < MIN_TEMPERATURE:
            body["temperature"] = 0
        if "generation_config" in body:  # transformers' own field: it would bypass every check here
            raise BadRequest("generation_config is not taken by this server: send temperature, top_p, seed, "
                             "max_tokens and stop as fields of the request (the folder's generation_config.json "
                             "holds the defaults)", "generation_config", status=422)
        if body.get("frequency_penalty") not in (None, 0):
            raise BadRequest("frequency_penalty is not supported by this server: transformers' server turns it "
                             "into a repetition penalty (each present token's logit divided by 1 + the penalty), "
                             "not OpenAI's penalty by count: leave it out", "frequency_penalty", status=422)
        if body.get("suffix") not in (None, ""):  # transformers' handler appends it to the answer as it is
            raise BadRequest("suffix is not supported by this server (the model would not see it, and transformers' "
                             "server appends it to the answer as it is): leave it out", "suffix", status=422)
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and (not isinstance(kwargs, dict) or HANDLER_TEMPLATE_KWARGS & set(kwargs)):
            raise BadRequest("chat_template_kwargs must be an object of the chat template's own variables (the "
                             f"server sets {', '.join(sorted(HANDLER_TEMPLATE_KWARGS))}), got {reprlib.repr(kwargs)}",
                             "chat_template_kwargs")
        self.check_logit_bias(route, body)
        self.check_stop(body)
        harmless_fields = HARMLESS_IN_COMPLETIONS if route == "/v1/completions" else HARMLESS
        for name in sorted(ignored_fields(route) & set(body)):
            harmless = harmless_fields.get(name, ())
            if harmless is not None and body[name] not in harmless:
                raise BadRequest(f"{name} is not supported by this server (transformers' server would ignore it): "
                                 "leave it out", name, status=422)

    def check_logit_bias(self, route: str, body: dict) -> None:
        bias = body.get("logit_bias")
        if bias in (None, {}):
            return
        if route == "/v1/completions" or self.shared_sampling is not None:
            where = "on /v1/completions" if route == "/v1/completions" else "under --continuous-batching"
            raise BadRequest(f"logit_bias is not supported {where} (transformers' server would ignore it): "
                             "leave it out" + ("" if route == "/v1/completions" else
                                               ", or serve without --continuous-batching"), "logit_bias", status=422)
        vocab = len(self.tokenizer)
        if not isinstance(bias, dict) or not all(
                isinstance(token, str) and TOKEN_ID.fullmatch(token) and int(token) < vocab
                and isinstance(value, (int, float)) and not isinstance(value, bool) and -100 <= value <= 100
                for token, value in bias.items()):
            raise BadRequest(f"logit_bias must map token ids (strings of integers below the vocabulary's {vocab}) to "
                             f"numbers from -100 to 100, got {reprlib.repr(bias)}", "logit_bias")

    def check_stop(self, body: dict) -> None:
        stop = body.get("stop")
        stops = [stop] if isinstance(stop, str) else stop
        if stops is None or stops == []:
            body.pop("stop", None)
            return
        if not (isinstance(stops, list) and 0 < len(stops) <= MAX_STOPS
                and all(isinstance(text, str) and text for text in stops)):
            raise BadRequest(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them, got "
                             f"{reprlib.repr(stop)}", "stop")
        vocab = len(self.tokenizer)
        if (needed := stop_table_bytes(vocab, stops)) > MAX_STOP_TABLE_BYTES:  # a request of long ones ran out of RAM
            raise BadRequest(f"stop strings like these (up to {max(map(len, stops)):,} characters) would need a "
                             f"{needed / 2**20:,.0f} MiB matching table over this model's {vocab:,}-token vocabulary, "
                             f"beyond the {MAX_STOP_TABLE_BYTES // 2**20} MiB a request may take: shorten them",
                             "stop")
        if self.shared_sampling is not None:
            raise BadRequest("stop is not supported under --continuous-batching (transformers' batching worker "
                             "would ignore it): leave it out, or serve without --continuous-batching", "stop",
                             status=422)
        if self.stop_strings_failure is None:
            self.stop_strings_failure = stop_strings_failure(self.tokenizer)
        if self.stop_strings_failure:
            raise BadRequest(f"stop cannot be used with this model's tokenizer: transformers' stop strings fail on "
                             f"its vocabulary ({self.stop_strings_failure})", "stop", status=422)
        body["stop"] = stops

    def fit_to_context(self, route: str, body: dict) -> None:
        """Checks that the prompt and the tokens asked for fit the model's context; by default asks for the room
        left."""
        prompt_tokens = self.count_prompt_tokens(route, body)
        room = self.context_length - prompt_tokens
        context = f"the model's context of {self.context_length} tokens ({self.context_origin})"
        if room < 1:
            raise BadRequest(f"the prompt is {prompt_tokens} tokens, which leaves no room in {context}: "
                             "shorten the prompt", "messages" if route.endswith("chat/completions") else "prompt")
        field = "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
        asked = body.get(field)
        if asked is None:
            body["max_tokens"] = room
        elif asked > room:
            raise BadRequest(f"the prompt is {prompt_tokens} tokens and {asked} more are asked for ({field}), beyond "
                             f"{context}: ask for at most {room} or shorten the prompt", field)

    def count_prompt_tokens(self, route: str, body: dict) -> int:
        if route == "/v1/completions":
            if "prompt" not in body:  # 422 as FastAPI answers a missing field; OpenAI requires a prompt too
                raise BadRequest('prompt is missing: a completion needs a prompt ("" starts a new document)',
                                 "prompt", status=422)
            prompt = body["prompt"]
            if not isinstance(prompt, str):
                raise BadRequest("prompt must be a string (one prompt per request)", "prompt")
            tokens = len(self.tokenizer(prompt).input_ids)
            if tokens == 0:  # nothing to continue: a new document, from its start token
                body["prompt"], tokens = self.start_text + prompt, 1
            return tokens
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise BadRequest('messages must be a non-empty list of {"role": ..., "content": ...} objects', "messages")
        if self.tokenizer.chat_template is None:
            raise BadRequest("this model's tokenizer has no chat template: use /v1/completions with a prompt",
                             "messages")
        try:  # as transformers' chat handler formats them
            ids = self.tokenizer.apply_chat_template(
                chat_processor_inputs(messages), add_generation_prompt=True,
                tools=chat_tools(body.get("tools")), tokenize=True, return_dict=True,
                **body.get("chat_template_kwargs") or {},
            )["input_ids"]
        except Exception as error:  # the template's own message (a jinja error, a missing field)
            raise BadRequest(f"the chat template cannot format these messages: {error}", "messages") from None
        return len(ids)

    def models(self):
        """GET /v1/models: the one model this server serves, under the name clients send."""
        from starlette.responses import JSONResponse

        return JSONResponse({"object": "list", "data": [
            {"id": self.listed_name, "object": "model", "created": 0, "owned_by": "depthattn"}]})


class ResponseRewriter:
    """Rewrites a generation response's JSON (a body, or each `data: {...}` event of a stream): its "model" from
    the folder transformers' app knows to the name clients were told (--served-model-name), and its text cut before
    the first of the request's `stop` strings, as the OpenAI API returns it (transformers ends generation once the
    text ends with one, which stays in the text). Not streamed, the body is held until it is whole and its
    content-length set anew; streamed, text that may begin a stop string is held until the next event tells."""

    def __init__(self, model_id: str, listed_name: str, streaming: bool, stops: list[str] | tuple = ()):
        self.model_id, self.listed_name, self.streaming = model_id, listed_name, streaming
        self.cut = StopCut(list(stops)) if stops else None
        self.start: dict | None = None
        self.held = b""

    def __call__(self, message: dict) -> list[dict]:
        if self.model_id == self.listed_name and self.cut is None:
            return [message]
        if message["type"] == "http.response.start" and not self.streaming:
            self.start = message
            return []
        if message["type"] != "http.response.body":
            return [message]
        self.held += message.get("body", b"")
        more = message.get("more_body", False)
        if not self.streaming:
            if more:
                return []
            if self.start is None:
                raise RuntimeError("the server sent a response body before its start")
            body = self._rewritten(self.held)
            headers = [(k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"]
            return [{**self.start, "headers": [*headers, (b"content-length", str(len(body)).encode())]},
                    {**message, "body": body}]
        cut = self.held.rfind(b"\n") + 1 if more else len(self.held)  # whole lines only, the rest held
        if cut == 0:
            return []
        whole, self.held = self.held[:cut], self.held[cut:]
        lines = [b"data: " + self._rewritten(line[6:]) if line.startswith(b"data: {") else line
                 for line in whole.split(b"\n")]
        return [{**message, "body": b"\n".join(lines)}]

    def _rewritten(self, raw: bytes) -> bytes:
        try:
            answer = json.loads(raw)
        except ValueError:
            return raw
        if not isinstance(answer, dict):
            return raw
        if answer.get("model") == self.model_id:
            answer["model"] = self.listed_name
        if self.cut is not None:
            self.cut(answer, whole=not self.streaming)
        return json.dumps(answer).encode()


class StopCut:
    """A response's text cut before the first of `stops`: one body whole, or a stream's events in order, holding
    back the end of the text that may begin a stop string until the next event (or the last) settles it."""

    def __init__(self, stops: list[str]):
        self.stops, self.pending, self.stopped = stops, "", False

    def __call__(self, answer: dict, whole: bool) -> None:
        choices = answer.get("choices")
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            return  # a stream's usage event
        choice = choices[0]
        holder, key = _text_slot(choice)
        text = holder.get(key) or "" if holder is not None else ""
        last = whole or choice.get("finish_reason") is not None
        if self.stopped:
            out = ""
        else:
            self.pending += text
            found = [at for at in (self.pending.find(stop) for stop in self.stops) if at >= 0]
            if found:
                out, self.pending, self.stopped = self.pending[:min(found)], "", True
            else:
                keep = 0 if last else _stop_prefix_length(self.pending, self.stops)
                out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        if holder is not None and (holder.get(key) is not None or out):  # a tool call's null content stays null
            holder[key] = out
        if last and self.stopped:
            choice["finish_reason"] = "stop"


def _text_slot(choice: dict) -> tuple[dict | None, str]:
    """Where a choice holds its text: a completion's "text", a chat stream's delta, a chat answer's message."""
    if "text" in choice:
        return choice, "text"
    for name in ("delta", "message"):
        if isinstance(choice.get(name), dict):
            return choice[name], "content"
    return None, ""


def _stop_prefix_length(text: str, stops: list[str]) -> int:
    """The length of the longest end of `text` that begins some stop string (and may be completed later)."""
    return max((n for stop in stops for n in range(min(len(stop) - 1, len(text)), 0, -1)
                if stop.startswith(text[len(text) - n:])), default=0)


def _not_served(method: str, path: str) -> BadRequest:
    served = ", ".join(f"{m} {p}" for m, p in sorted(SERVED_ROUTES, key=lambda route: (route[1], route[0])))
    allowed = sorted(m for m, p in SERVED_ROUTES if p == path)
    return BadRequest(f"{method} {path} is not served here; this server answers {served}",
                      status=405 if allowed else 404, headers={"Allow": ", ".join(allowed)} if allowed else None)


def _check_number(body: dict, name: str, low: float, high: float = math.inf, integer: bool = False,
                  open_low: bool = False, hint: str = ""):
    value = body.get(name)
    if value is None:
        return
    number = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not number or not _finite(value) or (value <= low if open_low else value < low) or value > high:
        bounds = (f"> {low}" if open_low else f">= {low}") + (f" and <= {high}" if high < math.inf else "")
        raise BadRequest(f"{name} must be {'an integer' if integer else 'a number'} {bounds}{hint}, got "
                         f"{reprlib.repr(value)}", name)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past any float (10**400)
        return False


def _openai_error(status: int, body: bytes):
    """An error response from transformers' app ({"error": ...}, or FastAPI's {"detail": ...}), with its message in
    OpenAI's shape: a validation error's list of problems becomes the message, and stays a list under "detail"."""
    try:
        answer = json.loads(body)
        error = answer["error"] if "error" in answer else answer["detail"]
    except (ValueError, KeyError, TypeError):
        return _error_response(BadRequest(body.decode(errors="replace"), status=status))
    if isinstance(error, dict) and "message" in error:
        return _error_response(BadRequest(error["message"], error.get("param"), status))
    if isinstance(error, list) and all(isinstance(item, dict) and "msg" in item for item in error):
        message = "; ".join(f"{'.'.join(map(str, item.get('loc', ())[1:]))}: {item['msg']}" for item in error)
        return _error_response(BadRequest(message, status=status), detail=error)
    return _error_response(BadRequest(error if isinstance(error, str) else json.dumps(error), status=status))


def _error_response(error: BadRequest, detail: list | None = None):
    from starlette.responses import JSONResponse

    kind = "server_error" if error.status >= 500 else "invalid_request_error"
    kind = "not_found_error" if error.status == 404 else kind
    fields = {"message": str(error), "type": kind, "param": error.param, "code": None}
    return JSONResponse({"error": fields if detail is None else {**fields, "detail": detail}},
                        status_code=error.status, headers=error.headers)
