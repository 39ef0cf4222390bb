"""`depthattn serve` end to end: a server process per model (Depth-Attention with continuous batching, vanilla
without) answers concurrent requests with `generate`'s greedy text, streams the same text, answers bad requests
with a 4xx and keeps serving, and ends with exit code 0 on SIGTERM."""

import functools
import json
import random
import signal
import socket
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

import benchmarks.serving
from depthattn.data.tokenizer import start_token_id, train_bpe_tokenizer, word_level_tokenizer
from depthattn.loading import load_model
from tests.helpers import tiny_model

pytest.importorskip("uvicorn", reason='needs the serve extra: pip install "depthattn[serve]"')

# a word-level vocabulary (one token per word): a stream of tokens joins to the full decode
WORDS = ("the a of and to in is it that was he for on are as with his they at be this from have or by one had not "  # noqa: SIM905  (a long word list)
         "but what all were when we there can an your which their said if do will each about how up out them then "
         "she many some so these would other into has more her two like him see time could no make than first").split()
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}assistant"
CONTEXT = 64
PROMPTS = ["the cat sat on", "when we see them", "a", "it was the first time that he"]
MAX_TOKENS = 8
SERVED_NAME = "tiny-depth-attention"
TRAINED_CONTEXT = 32  # the moda server's folder sits in a run trained at this seq_len (train_config.json)
SERVERS = {"depth_attention": (dict(depth_stride=1, depth_impl="compiled"),
                               ["--continuous-batching", "--method-field", "depth_impl=reference",
                                "--served-model-name", SERVED_NAME]),
           "vanilla": (dict(cross_layer="vanilla"), []),
           "moda": (dict(cross_layer="moda"), [])}


# a server whose tokenizer is a byte-level BPE, as users' are: transformers' stop strings need one (a word-level
# vocabulary fails them); not in SERVERS, whose tests rely on one token per word (bpe_server)
BPE_SERVER = "bpe"


def save_model_folder(folder, chat_template=None, bpe=False, **settings):
    tokenizer = train_bpe_tokenizer([" ".join(WORDS)] * 4, 300, folder) if bpe else word_level_tokenizer(WORDS)
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(folder)
    model = tiny_model(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       max_position_embeddings=CONTEXT, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, **settings)
    model.save_pretrained(folder)


class Server(benchmarks.serving.Server):
    def request(self, route, body=None):
        """(status, content) of a POST of `body` (a dict, or bytes as they are) or, without one, a GET."""
        return self.post(route, body if body is None or isinstance(body, bytes) else json.dumps(body).encode())

    def completion(self, prompt, **fields):
        status, answer = self.request("/v1/completions", dict(prompt=prompt, temperature=0, **fields))
        assert status == 200, answer
        return json.loads(answer)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Both servers, started together (most of a start is importing torch and transformers)."""
    started = {}
    for name, (settings, args) in SERVERS.items():
        folder = tmp_path_factory.mktemp(name)
        save_model_folder(folder, chat_template=CHAT_TEMPLATE if name == "depth_attention" else None, **settings)
        if name == "moda":
            (folder / "train_config.json").write_text(json.dumps({"data": {"seq_len": TRAINED_CONTEXT}}))
        started[name] = Server(str(folder), ["--device", "cpu", *args], folder / "server.log", threads=1)
    try:
        for server in started.values():
            server.wait_ready(timeout=180)
        yield started
    finally:
        for server in started.values():
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()


@pytest.fixture(scope="module")
def bpe_server(tmp_path_factory):
    """A Depth-Attention server whose tokenizer is a byte-level BPE, started when a test first asks for it."""
    folder = tmp_path_factory.mktemp(BPE_SERVER)
    save_model_folder(folder, bpe=True, depth_stride=1)
    server = Server(str(folder), ["--device", "cpu"], folder / "server.log", threads=1)
    try:
        server.wait_ready(timeout=180)
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@functools.cache
def reference(folder):
    """The served model and tokenizer, loaded from the folder as any user would."""
    return load_model(folder, device="cpu"), PreTrainedTokenizerFast.from_pretrained(folder)


def greedy_text(server, prompt, max_new_tokens=MAX_TOKENS):
    model, tokenizer = reference(server.folder)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_models_lists_the_name_clients_send(servers):
    for name, listed in (("vanilla", servers["vanilla"].folder), ("depth_attention", SERVED_NAME)):
        status, answer = servers[name].request("/v1/models")
        assert status == 200 and [m["id"] for m in json.loads(answer)["data"]] == [listed]


def test_requests_may_name_the_served_name_the_folder_or_its_resolved_path(servers):
    server = servers["depth_attention"]
    for model in (SERVED_NAME, server.folder, str(Path(server.folder).resolve())):
        answer = server.completion(PROMPTS[0], max_tokens=2, model=model)
        assert answer["choices"][0]["text"] == greedy_text(server, PROMPTS[0], 2)


@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("prompt", ["", "   "])
def test_an_empty_prompt_starts_a_new_document_as_generate_does(servers, name, prompt):
    server = servers[name]
    model, tokenizer = reference(server.folder)
    start = torch.tensor([[start_token_id(tokenizer)]])
    with torch.no_grad():
        out = model.generate(start, max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    expected = tokenizer.decode(out[0, 1:], skip_special_tokens=True)
    assert server.completion(prompt, max_tokens=MAX_TOKENS)["choices"][0]["text"] == expected
    assert server.request("/health")[0] == 200  # and the worker goes on


def test_generate_starts_a_new_document_from_a_prompt_of_no_tokens():
    """As the server does: "   " gives a word-level vocabulary no token (generate's reshape of nothing failed)."""
    from depthattn.serving.generation import sample

    tokenizer = word_level_tokenizer(WORDS)
    model = tiny_model(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id).eval()
    assert tokenizer("   ").input_ids == []
    assert sample(model, tokenizer, "   ", 4, 0.0, 0, 0) == sample(model, tokenizer, "", 4, 0.0, 0, 0)


def test_method_field_option_switches_the_served_model(servers):
    assert "cross_layer='depth_attention' computes with depth_impl='reference'" in \
        servers["depth_attention"].log.read_text()


@pytest.mark.parametrize("name", SERVERS)
def test_concurrent_completions_are_greedy_generate(servers, name):
    server = servers[name]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        answers = list(pool.map(lambda p: server.completion(p, max_tokens=MAX_TOKENS), PROMPTS))
    for prompt, answer in zip(PROMPTS, answers, strict=True):
        assert answer["choices"][0]["text"] == greedy_text(server, prompt)
        assert answer["usage"]["completion_tokens"] <= MAX_TOKENS


@pytest.mark.parametrize("name", SERVERS)
def test_streamed_chunks_join_to_the_text(servers, name):
    status, answer = servers[name].request(
        "/v1/completions", dict(prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, stream=True))
    assert status == 200
    lines = [line for line in answer.decode().splitlines() if line.strip()]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1  # OpenAI's end of a stream
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == greedy_text(servers[name], PROMPTS[0])
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_without_max_tokens_generation_stops_at_the_context(servers):
    usage = servers["vanilla"].completion(PROMPTS[3])["usage"]
    assert usage["total_tokens"] <= CONTEXT


def test_chat_completion_with_the_chat_template(servers):
    server = servers["depth_attention"]
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is the time"}]}]  # OpenAI content parts
    status, answer = server.request("/v1/chat/completions",
                                    dict(messages=messages, max_tokens=MAX_TOKENS, temperature=0))
    assert status == 200, answer
    templated = "user what is the time assistant"  # CHAT_TEMPLATE applied to the messages
    assert json.loads(answer)["choices"][0]["message"]["content"] == greedy_text(server, templated)


BAD_REQUESTS = {
    "max_tokens 0": ("/v1/completions", dict(prompt="the", max_tokens=0), 400, "max_tokens must be an integer >= 1"),
    "max_tokens -3": ("/v1/completions", dict(prompt="the", max_tokens=-3), 400, "max_tokens must be"),
    "prompt beyond the context": ("/v1/completions", dict(prompt="the " * (CONTEXT + 1), max_tokens=1), 400,
                                  "no room in the model's context of 64 tokens"),
    "prompt and max_tokens beyond the context": ("/v1/completions", dict(prompt="the " * 60, max_tokens=10), 400,
                                                 "ask for at most 4"),
    "prompt and max_completion_tokens beyond the context": ("/v1/completions",
                                                            dict(prompt="the " * 60, max_completion_tokens=10), 400,
                                                            "(max_completion_tokens), beyond"),
    "unknown model": ("/v1/completions", dict(prompt="the", model="gpt-4", max_tokens=2), 404, "'gpt-4' is not served"),
    "a model name of a megabyte": ("/v1/completions", dict(prompt="the", model="x" * 2**20), 404,
                                   "model 'xxxxxxxxxxxx...xxxxxxxxxxxxx' is not served"),
    "malformed JSON": ("/v1/completions", b'{"prompt": "the", ', 400, "not valid JSON"),
    "a body past 32 MiB": ("/v1/completions", b'{"prompt": "' + b"the " * (8 * 2**20 + 1) + b'"}', 413,
                           "the request body passes 32 MiB"),
    # each of these five was a bare 500 (plain text, a traceback in the log)
    "JSON nested past Python's recursion": ("/v1/completions", b'{"prompt": "the", "user": ' + b"[" * 100_000
                                            + b"]" * 100_000 + b"}", 400, "nests JSON too deeply"),
    "model not a string": ("/v1/completions", dict(prompt="the", model=["x"]), 400, "model must be a string"),
    "max_tokens past any float": ("/v1/completions", dict(prompt="the", max_tokens=10**400), 400,
                                  "max_tokens must be an integer >= 1"),
    "temperature past any float": ("/v1/completions", dict(prompt="the", temperature=10**400), 400,
                                   "temperature must be a number >= 0"),
    "chat_template_kwargs the server sets": ("/v1/chat/completions",
                                             dict(messages=[{"role": "user", "content": "hi"}],
                                                  chat_template_kwargs={"return_tensors": "pt"}),
                                             400, "chat_template_kwargs must be an object of the chat template's own"),
    "suffix": ("/v1/completions", dict(prompt="the", suffix=" end"), 422, "suffix is not supported"),
    "a completion's logprobs 0": ("/v1/completions", dict(prompt="the", logprobs=0), 422,
                                  "logprobs is not supported"),  # it asks for the sampled tokens' logprobs
    "negative temperature": ("/v1/completions", dict(prompt="the", temperature=-0.5), 400,
                             "temperature must be a number >= 0"),
    "chat without a chat template": ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}]), 400,
                                     "no chat template"),
    "no prompt": ("/v1/completions", dict(max_tokens=2), 422, 'prompt is missing: a completion needs a prompt ("" '),
    "unexpected field": ("/v1/completions", dict(prompt="the", colour="red"), 422,
                         "Unexpected fields in the request: {'colour'}"),  # transformers' 422, FastAPI's {"detail"}
    "a field transformers ignores": ("/v1/completions", dict(prompt="the", logprobs=2), 422,
                                     "logprobs is not supported by this server"),
    "one in a chat": ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}], top_logprobs=3), 422,
                      "top_logprobs is not supported"),
    # transformers' app answers these, unchecked (/v1/responses past the context) or unloading the model (/reset)
    "a route not served": ("/v1/responses", dict(input="the", max_output_tokens=100), 404,
                           "POST /v1/responses is not served here; this server answers GET /health, "),
    "a reset": ("/reset", {}, 404, "POST /reset is not served here"),
    "a served route's other method": ("/v1/completions", None, 405, "GET /v1/completions is not served here"),
    "a seed not an integer": ("/v1/completions", dict(prompt="the", seed=[1]), 400, "seed must be an integer >= 0"),
    "a seed out of range": ("/v1/completions", dict(prompt="the", seed=2**70), 400, "seed must be an integer >= 0 and"),
    "stream_options not an object": ("/v1/completions", dict(prompt="the", stream=True, stream_options="yes"), 400,
                                     "stream_options must be an object"),
    "generation_config": ("/v1/completions", dict(prompt="the", generation_config='{"max_new_tokens": 99}'), 422,
                          "generation_config is not taken by this server"),
    "frequency_penalty": ("/v1/completions", dict(prompt="the", frequency_penalty=0.5), 422,
                          "not OpenAI's penalty by count"),
    "logit_bias in a completion": ("/v1/completions", dict(prompt="the", logit_bias={"3": 100}), 422,
                                   "logit_bias is not supported on /v1/completions"),
    "logit_bias naming no token": ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}],
                                                                logit_bias={"the": 5}), 400,
                                   "logit_bias must map token ids"),
    "logit_bias of a digit int() refuses": ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}],
                                                                         logit_bias={"\u00b2": 5}), 400,
                                            "logit_bias must map token ids"),
    "stop not text": ("/v1/completions", dict(prompt="the", stop=[1]), 400, "stop must be a non-empty string or a"),
    # four of 200,000 characters took a server with a 3,438-token vocabulary past 22 GB
    "stop strings too long": ("/v1/completions", dict(prompt="the", stop=["ab" * 500_000] * 4), 400,
                              "stop strings like these (up to 1,000,000 characters) would need a "),
    "stop on a word-level vocabulary": ("/v1/completions", dict(prompt="the", stop="of"), 422,
                                        "stop cannot be used with this model's tokenizer"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_bad_request_is_a_4xx_with_a_message(servers, case):
    route, body, status, message = BAD_REQUESTS[case]
    got, answer = servers["vanilla"].request(route, body)
    error = json.loads(answer)["error"]
    assert got == status and message in error["message"], error
    assert not error["message"].lstrip().startswith("{")  # a message, not a JSON body inside a string
    assert len(answer) < 2000  # whatever the request held: a value it names is shortened


def test_a_route_asked_with_another_method_answers_which_it_takes(servers):
    request = urllib.request.Request(f"http://localhost:{servers['vanilla'].port}/v1/models", method="POST")
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=60)
    assert answer.value.code == 405 and answer.value.headers["Allow"] == "GET"  # as HTTP asks of a 405


def sampled_text(server, prompt, seed, temperature=1.0, max_new_tokens=MAX_TOKENS):
    """`generate` sampling as the OpenAI API does: at `temperature`, top_p 1, no top-k, from `seed`."""
    model, tokenizer = reference(server.folder)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_k=0,
                             top_p=1.0, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("temperature", [None, 5.0])  # None: left out, so the OpenAI API's default of 1
def test_a_request_samples_at_its_temperature_and_seed_as_generate_does(servers, temperature):
    server = servers["vanilla"]
    fields = dict(prompt=PROMPTS[3], max_tokens=MAX_TOKENS)
    if temperature is not None:
        fields["temperature"] = temperature
    texts = {}
    for seed in (3, 4):
        status, answer = server.request("/v1/completions", dict(fields, seed=seed))
        assert status == 200, answer
        texts[seed] = json.loads(answer)["choices"][0]["text"]
        assert texts[seed] == sampled_text(server, PROMPTS[3], seed, temperature or 1.0)
    assert texts[3] != texts[4] and greedy_text(server, PROMPTS[3]) not in texts.values()


def test_under_continuous_batching_a_request_cannot_ask_for_other_sampling(servers):
    server = servers["depth_attention"]  # its folder's generation config: greedy, shared by the batch
    got, answer = server.request("/v1/completions", dict(prompt="the", max_tokens=2, temperature=0.7))
    message = json.loads(answer)["error"]["message"]
    assert got == 400 and "temperature 0.7 cannot be honoured" in message and "greedy decoding" in message
    left_out = server.request("/v1/completions", dict(prompt=PROMPTS[0], max_tokens=2, top_p=0.5))  # no effect
    assert left_out[0] == 200 and json.loads(left_out[1])["choices"][0]["text"] == greedy_text(server, PROMPTS[0], 2)
    # what transformers' batching worker drops: refused, not ignored
    for fields, refused in ((dict(prompt="the", stop="of"), "stop is not supported under --continuous-batching"),
                            (dict(messages=[{"role": "user", "content": "hi"}], logit_bias={"3": 100}),
                             "logit_bias is not supported under --continuous-batching")):
        route = "/v1/completions" if "prompt" in fields else "/v1/chat/completions"
        got, answer = server.request(route, dict(fields, max_tokens=2))
        assert got == 422 and refused in json.loads(answer)["error"]["message"], answer


@pytest.mark.parametrize("stream", [False, True])
def test_the_text_ends_before_the_stop_string_as_the_openai_api_returns_it(bpe_server, stream):
    server = bpe_server
    model, tokenizer = reference(server.folder)
    prompt, length = PROMPTS[1], 12  # its greedy answer has a word among random bytes
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        tokens = model.generate(ids, max_new_tokens=length, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    tokens = tokens[0, ids.shape[1]:].tolist()
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    stop = next(piece for piece in (tokenizer.decode(tokens[k:k + 1]) for k in range(1, length))
                if piece.strip() and piece.isascii() and piece.isprintable())  # a word from the answer's middle
    status, answer = server.request("/v1/completions", dict(prompt=prompt, max_tokens=length, temperature=0,
                                                            stop=[stop, "never said"], stream=stream))
    assert status == 200, answer
    if stream:
        events = [json.loads(line[6:]) for line in answer.decode().splitlines() if line.startswith("data: {")]
        got, finish = "".join(e["choices"][0]["text"] for e in events), events[-1]["choices"][0]["finish_reason"]
    else:
        got, finish = json.loads(answer)["choices"][0]["text"], json.loads(answer)["choices"][0]["finish_reason"]
    assert (got, finish) == (text[:text.index(stop)], "stop"), (text, stop)


def test_a_stop_string_begun_by_the_prompt_does_not_end_the_answer(bpe_server):
    """OpenAI's stop reads the answer alone: transformers' stop strings read the prompt too, so the prompt's last
    character and the answer's first stopped generation at once (a prompt ending in a newline, with "\n\n")."""
    model, tokenizer = reference(bpe_server.folder)
    prompt, length = PROMPTS[1], 12
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        tokens = model.generate(ids, max_new_tokens=length, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(tokens[0, ids.shape[1]:], skip_special_tokens=True)
    stop = prompt[-1] + text[0]  # spelt across the prompt's end
    status, answer = bpe_server.request("/v1/completions", dict(prompt=prompt, max_tokens=length, temperature=0,
                                                                stop=stop))
    assert status == 200, answer
    choice = json.loads(answer)["choices"][0]
    expected = (text[:text.index(stop)], "stop") if stop in text else (text, "length")
    assert (choice["text"], choice["finish_reason"]) == expected, (prompt, text, stop)


def test_fields_at_values_that_change_nothing_are_taken(servers):
    for fields in (dict(echo=False), dict(best_of=1), dict(n=1, presence_penalty=0, user="me", suffix="")):
        status, answer = servers["vanilla"].request("/v1/completions", dict(prompt="the", max_tokens=1, **fields))
        assert status == 200, (fields, answer)


@pytest.mark.parametrize("stops", [["aaaa" * 16], ["the end", "\n\n"], ["ab" * 20] * 4, ["ththth", "e e e e"]])
def test_the_stop_table_bound_holds_transformers_own_table(tmp_path, stops):
    """The bound a request's stop strings are checked against is at least the table transformers builds for them,
    repeating strings (whose every position a token may take) included."""
    from transformers import StopStringCriteria

    from depthattn.serving.server import stop_table_bytes

    tokenizer = train_bpe_tokenizer([" ".join(WORDS)] * 4, 300, tmp_path)  # as the BPE server's
    table = StopStringCriteria(tokenizer, stops).embedding_vec
    assert table.numel() * table.element_size() <= stop_table_bytes(len(tokenizer), stops)


@pytest.mark.parametrize("texts, stops, expected", [
    (["ab", "cE", "N", "Dxyz", ""], ["END"], ["ab", "c", "", "", ""]),  # a stop string over three events
    (["aE", "Nb", ""], ["END"], ["a", "ENb", ""]),  # a beginning held, then given back
    (["x", "yz", ""], ["z", "y"], ["x", "", ""]),  # the first of several
])
def test_a_stream_is_cut_before_its_stop_string_whichever_events_it_spans(texts, stops, expected):
    from depthattn.serving.server import StopCut

    cut, got = StopCut(stops), []
    for number, text in enumerate(texts):
        event = {"choices": [{"text": text, "finish_reason": "length" if number == len(texts) - 1 else None}]}
        cut(event, whole=False)
        got.append(event["choices"][0]["text"])
    assert got == expected and event["choices"][0]["finish_reason"] == ("stop" if cut.stopped else "length")


def test_a_chat_answer_is_cut_before_its_stop_string_streamed_or_whole():
    from depthattn.serving.server import StopCut

    whole = {"choices": [{"message": {"role": "assistant", "content": "one two three"}, "finish_reason": "length"}]}
    StopCut([" three", "two"])(whole, whole=True)
    assert whole["choices"][0] == {"message": {"role": "assistant", "content": "one "}, "finish_reason": "stop"}
    cut, events = StopCut(["two"]), [{"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]},
                                     {"choices": [{"delta": {"content": "one t"}, "finish_reason": None}]},
                                     {"choices": [{"delta": {"content": "wo"}, "finish_reason": None}]},
                                     {"choices": [{"delta": {}, "finish_reason": "length"}]}, {"usage": {}}]
    for event in events:
        cut(event, whole=False)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:4]) == "one "
    assert events[3]["choices"][0]["finish_reason"] == "stop" and events[4] == {"usage": {}}
    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}  # no content where none was
    tool_call = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "tool_calls"}]}
    StopCut(["two"])(tool_call, whole=True)
    assert tool_call["choices"][0]["message"]["content"] is None


def test_a_temperature_too_small_to_sample_at_is_greedy(servers):
    server = servers["vanilla"]  # logits over 1e-40 overflow float32: generation failed with a 500
    got, answer = server.request("/v1/completions", dict(prompt=PROMPTS[0], max_tokens=4, temperature=1e-40, seed=1))
    assert got == 200 and json.loads(answer)["choices"][0]["text"] == greedy_text(server, PROMPTS[0], 4), answer


def test_every_response_names_the_served_model_name(servers):
    server = servers["depth_attention"]
    assert server.completion(PROMPTS[0], max_tokens=2)["model"] == SERVED_NAME
    status, answer = server.request("/v1/completions", dict(prompt=PROMPTS[0], max_tokens=3, temperature=0,
                                                            stream=True))
    events = [line.removeprefix("data: ") for line in answer.decode().splitlines() if line.startswith("data: {")]
    assert status == 200 and events and {json.loads(e)["model"] for e in events} == {SERVED_NAME}
    assert servers["vanilla"].completion(PROMPTS[0], max_tokens=2)["model"] == servers["vanilla"].folder


def test_a_validation_errors_list_stays_a_list():
    from depthattn.serving.server import _openai_error

    problems = [{"loc": ["body", "prompt"], "msg": "Field required", "type": "missing"}]
    response = _openai_error(422, json.dumps({"detail": problems}).encode())
    error = json.loads(response.body)["error"]
    assert response.status_code == 422 and error["message"] == "prompt: Field required" and error["detail"] == problems


def test_the_served_context_is_the_trained_one(servers):
    server = servers["moda"]
    assert f"with a context of {TRAINED_CONTEXT} tokens (the training seq_len; max_position_embeddings {CONTEXT})" \
        in server.log.read_text()
    got, answer = server.request("/v1/completions", dict(prompt="the " * (TRAINED_CONTEXT + 1), max_tokens=1))
    assert got == 400 and f"no room in the model's context of {TRAINED_CONTEXT} tokens (the training seq_len)" \
        in json.loads(answer)["error"]["message"]


def test_context_length_option_beyond_the_trained_one_warns(tmp_path):
    from depthattn.serving.app import served_context

    (tmp_path / "train_config.json").write_text(json.dumps({"data": {"seq_len": 128}}))
    assert served_context(tmp_path, 4096, None) == (128, "the training seq_len", None)
    length, origin, warning = served_context(tmp_path, 4096, 4096)
    assert (length, origin) == (4096, "--context-length") and "beyond the 128 tokens the model was trained" in warning
    assert served_context(tmp_path / "final", 4096, 100)[2] is None  # train_config.json above the folder counts too
    with pytest.raises(ValueError, match="between 1 and the model's max_position_embeddings"):
        served_context(tmp_path, 4096, 5000)


def test_serving_benchmark_measures_both_servers_in_alternating_rounds(servers):
    work = dict(warmup=1, rounds=2, prompt_tokens=3, requests=1, max_tokens=6)
    result = benchmarks.serving.measure(servers, 2, work, list(WORDS), random.Random(0))
    for name in SERVERS:
        assert result[name]["requests"] == 4 and result[name]["tokens_per_s"]["n"] == 2
        assert result[name]["tokens_per_s"]["median"] > 0 and result[name]["latency_p99_s"] > 0
        if sys.platform == "linux":  # server CPU time from /proc, in clock ticks: a round too short to tick is left out
            assert 1 <= result[name]["tokens_per_cpu_s"]["n"] <= 2 and result[name]["tokens_per_cpu_s"]["median"] > 0
    assert result["ratio"]["n"] == 2 and result["goal_met"] == (result["ratio"]["median"] >= 0.98)
    table = benchmarks.serving.markdown({"command": "test", "results": {2: result}})
    assert table.splitlines()[-1].startswith("| 2 | ")


@pytest.mark.parametrize("name", SERVERS)
def test_still_serving_after_bad_requests_then_sigterm_ends_it_cleanly(servers, name):
    server = servers[name]
    server.request("/v1/completions", dict(prompt="the", max_tokens=-3))
    assert server.completion(PROMPTS[1], max_tokens=MAX_TOKENS)["choices"][0]["text"] == greedy_text(
        server, PROMPTS[1])
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    log = server.log.read_text()
    assert "Shutting down" in log and "Traceback" not in log, log


def test_transformers_server_loads_a_depthattn_folder(tmp_path):
    """`transformers serve` finds the class of config.json `architectures` in the transformers package, in a process
    that imported depthattn (from 5.25 the model's own process, which `depthattn serve`'s loader imports it in)."""
    from transformers.cli.serving import model_manager

    from depthattn.serving.transformers_serve import engine_in_own_process

    save_model_folder(tmp_path)
    if engine_in_own_process():
        from depthattn.serving.engine_loader import MethodFieldsLoader

        loader = MethodFieldsLoader({"depth_impl": "reference"}, device="cpu")
        model, _ = loader.load_model_and_processor(str(tmp_path))
        assert model.config.depth_impl == "reference"
    else:
        manager = model_manager.ModelManager(device="cpu", force_model=str(tmp_path))
        try:
            model, _ = manager.load_model_and_processor(manager.process_model_name(str(tmp_path)))
        finally:
            manager.shutdown()
    assert type(model).__name__ == "DepthAttentionForCausalLM" and model.config.cross_layer == "depth_attention"


def test_a_method_that_cannot_run_packed_sequences_refuses_continuous_batching(tmp_path, capsys):
    from depthattn.cli import main

    save_model_folder(tmp_path, cross_layer="moda")
    assert main(["serve", str(tmp_path), "--continuous-batching"]) == 1
    assert "--continuous-batching: MoDA's depth keys join the attention's softmax" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--method-field", "depth_impl=bogus"], "depth_impl must be one of 'auto', 'reference'"),
    (["--port", "70000"], "--port must be 0 to 65535, got 70000"),
    (["--host", "nosuchhost.invalid"], "--host 'nosuchhost.invalid' is not an address"),
    (["--port", "{taken}"], "cannot listen on localhost:{taken} (Address already in use)"),
])
def test_a_bad_option_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch, args, message):
    """A port in use or out of range, a host that is none, a method field the method does not take: one line naming
    it, before transformers' server is built (it would print its traceback, or uvicorn its errno after loading)."""
    import depthattn.serving.app as app
    from depthattn.cli import main

    def never(*args, **kwargs):
        raise AssertionError("the server was built")

    monkeypatch.setattr(app, "transformers_server", never)
    save_model_folder(tmp_path)
    capsys.readouterr()  # the save's progress bars
    with socket.socket() as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        free = ["--port", "0"]  # any free port, unless the case names one
        assert main(["serve", str(tmp_path), *free, *(arg.format(taken=port) for arg in args)]) == 1
    assert capsys.readouterr().err.startswith(f"depthattn serve: error: {message.format(taken=port)}")


def test_a_cut_short_weights_file_is_refused_before_the_server_loads_it(tmp_path, capsys):
    from depthattn.cli import main

    save_model_folder(tmp_path)
    (tmp_path / "checksums.json").unlink(missing_ok=True)  # the shapes check, not the checksums, finds it
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert main(["serve", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "model.safetensors is not a readable safetensors file" in err and "Traceback" not in err
