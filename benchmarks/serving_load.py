"""`python -m benchmarks.serving_load`: N concurrent clients against a continuous-batching `depthattn serve` for a
fixed time, with a mix of good and bad requests: every good one must get `generate`'s greedy text, every bad one a
4xx, a client that disconnects mid-stream must not hurt the others, and the server must stay healthy. Prints the
counts per kind and exits 1 on any failure.

    python -m benchmarks.serving_load MODEL_DIR [--clients 8] [--seconds 60] [--max-tokens 8]

MODEL_DIR is a saved model folder with its tokenizer (e.g. runs/demo/depth_attention/final). The tests run a short
version (tests/faults/test_serving_load.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch

from depthattn.loading import find_tokenizer, load_model

from .serving import Server

KINDS = {  # kind: weight in the mix
    "good": 6, "good stream": 2, "empty prompt": 1, "too long": 1, "malformed JSON": 1, "negative max_tokens": 1,
    "negative temperature": 1, "disconnect mid-stream": 1,
}


def expected_texts(folder: str, prompts: list[str], max_tokens: int) -> dict[str, str]:
    """`generate`'s greedy continuation of each prompt, from the folder as a user loads it."""
    model, tokenizer = load_model(folder, device="cpu"), find_tokenizer(folder)
    texts = {}
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        texts[prompt] = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return texts


def one_request(server: Server, kind: str, prompt: str, max_tokens: int, context: int, expected: dict) -> str:
    """Send one request of `kind`; return "ok" or what went wrong."""
    body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0)
    if kind == "disconnect mid-stream":
        connection = http.client.HTTPConnection("localhost", server.port, timeout=60)
        connection.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                           {"content-type": "application/json"})
        response = connection.getresponse()
        response.read(16)  # the first bytes, then hang up
        connection.close()
        return "ok" if response.status == 200 else f"status {response.status}"
    bad = {"empty prompt": None, "too long": dict(body, prompt="the " * (context + 1)),
           "malformed JSON": b'{"prompt": "the", ', "negative max_tokens": dict(body, max_tokens=-2),
           "negative temperature": dict(body, temperature=-1.0)}
    if kind in ("good", "good stream", "empty prompt"):
        payload = dict(body, prompt="" if kind == "empty prompt" else prompt, stream=kind == "good stream")
        status, answer = server.post("/v1/completions", json.dumps(payload).encode())
        if status != 200:
            return f"status {status}: {answer[:200]!r}"
        if kind == "good stream":
            events = [line.removeprefix("data: ") for line in answer.decode().splitlines() if line.strip()]
            if events[-1:] != ["[DONE]"]:
                return f"stream does not end with data: [DONE]: {events[-1:]}"
            chunks = [json.loads(event) for event in events[:-1]]
            text = "".join(c["choices"][0]["text"] for c in chunks)
        else:
            text = json.loads(answer)["choices"][0]["text"]
        if kind == "empty prompt" or text == expected[prompt]:
            return "ok"
        return f"text {text!r}, not {expected[prompt]!r}"
    payload = bad[kind]
    status, answer = server.post("/v1/completions",
                                 payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    return "ok" if 400 <= status < 500 and json.loads(answer)["error"]["message"] else f"status {status}"


def run_load(server: Server, clients: int, seconds: float, prompts: list[str], expected: dict, max_tokens: int,
             context: int, seed: int = 0) -> dict:
    """Counts per kind of request and outcome, from `clients` threads sending for `seconds`."""
    counts, failures, lock = Counter(), [], threading.Lock()
    deadline = time.monotonic() + seconds

    def client(index: int):
        rng = random.Random(seed * 1000 + index)
        while time.monotonic() < deadline:
            kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
            try:
                outcome = one_request(server, kind, rng.choice(prompts), max_tokens, context, expected)
            except Exception as error:  # a client that dies would hide its failure: count it instead
                outcome = f"{type(error).__name__}: {error}"
            with lock:
                counts[kind, outcome == "ok"] += 1
                if outcome != "ok":
                    failures.append(f"{kind}: {outcome}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    healthy = server.post("/health")[0] == 200 and server.process.poll() is None
    return {"counts": {f"{kind} ({'ok' if ok else 'failed'})": n for (kind, ok), n in sorted(counts.items())},
            "failures": failures[:20], "healthy": healthy, "passed": not failures and healthy}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a saved model folder with its tokenizer")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--prompts", nargs="+", default=["ROMEO.\n", "To be, or not", "The king", "What light"])
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    args = parser.parse_args(argv)
    context = load_model(args.model, device="cpu").config.max_position_embeddings
    expected = expected_texts(args.model, args.prompts, args.max_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.model, ["--device", "cpu", "--continuous-batching"], Path(tmp) / "server.log",
                        threads=args.threads)
        try:
            server.wait_ready()
            result = run_load(server, args.clients, args.seconds, args.prompts, expected, args.max_tokens, context)
        finally:
            server.stop()
    for name, count in result["counts"].items():
        print(f"{count:8d}  {name}")
    print(f"server healthy at the end: {result['healthy']}")
    for failure in result["failures"]:
        print(f"  failed: {failure}", file=sys.stderr)
    print("PASSED" if result["passed"] else "FAILED")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
