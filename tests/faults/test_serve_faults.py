"""`depthattn serve` when things go wrong: a failure inside generation (injected: serve_with_fault.py) gets a 500
with its message; without continuous batching the server goes on, with it the worker dies and the server says so
and exits 1 for a supervisor to restart it; the default paged cache is small and one that does not fit is a startup
error; SIGTERM ends a running stream within the grace period."""

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import benchmarks.serving
from depthattn.data.tokenizer import word_level_tokenizer
from tests.test_serve import WORDS, save_model_folder

pytest.importorskip("uvicorn", reason='needs the serve extra: pip install "depthattn[serve]"')

FAULT_WORD = "cat"  # its token makes the model raise inside generation
FAULT_TOKEN = word_level_tokenizer(WORDS).convert_tokens_to_ids(FAULT_WORD)


class FaultyServer(benchmarks.serving.Server):
    """A `depthattn serve` process started through serve_with_fault.py."""

    def __init__(self, folder, options, log):
        super().__init__(str(folder), options, log, threads=1,
                         launcher=["-m", "tests.faults.serve_with_fault", str(FAULT_TOKEN)])

    def completion(self, prompt, **fields):
        status, answer = self.post("/v1/completions", json.dumps(dict(prompt=prompt, temperature=0, **fields)).encode())
        return status, json.loads(answer)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    save_model_folder(path, depth_stride=1)
    return path


def test_without_continuous_batching_a_failure_is_a_500_and_the_server_goes_on(folder, tmp_path):
    server = FaultyServer(folder, ["--device", "cpu"], tmp_path / "log")
    try:
        server.wait_ready(timeout=180)
        status, answer = server.completion(f"the {FAULT_WORD}", max_tokens=3)
        assert status == 500 and f"injected fault: token {FAULT_TOKEN}" in answer["error"]["message"]
        assert server.completion("the a of", max_tokens=3)[0] == 200
        assert server.post("/health")[0] == 200
    finally:
        server.stop()


def test_a_dead_generation_worker_stops_the_server_with_status_1(folder, tmp_path):
    server = FaultyServer(folder, ["--device", "cpu", "--continuous-batching"], tmp_path / "log")
    try:
        server.wait_ready(timeout=180)
        assert server.completion("the a of", max_tokens=3)[0] == 200
        # the default paged cache is sized from the model: sized from free memory, it took 6.5 GB for this one
        rss_kb = int(next(line for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines()
                          if line.startswith("VmRSS")).split()[1])
        assert rss_kb < 2 * 2**20
        status, answer = server.completion(f"the {FAULT_WORD}", max_tokens=3)
        assert status in (500, 503) and "injected fault" in answer["error"]["message"], (status, answer)
        assert server.process.wait(timeout=60) == 1  # never a server that lists models while generation is dead
        died = [line for line in server.log.read_text().splitlines() if "the generation worker died (" in line]
        assert died and "injected fault" in died[0] and died[0].endswith("stopping, exit status 1")
    finally:
        if server.process.poll() is None:
            server.process.kill()


def test_a_paged_cache_over_the_memory_budget_is_a_startup_error(folder, tmp_path):
    result = subprocess.run([sys.executable, "-m", "depthattn", "serve", str(folder), "--continuous-batching",
                             "--cb-max-sequences", "100000", "--cb-memory-gb", "1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [line for line in result.stderr.strip().splitlines()
                                                  if line.startswith("depthattn serve: error:")]
    assert "over --cb-memory-gb 1: lower --cb-max-sequences or --cb-num-blocks" in result.stderr


def test_a_paged_cache_smaller_than_one_request_is_a_startup_error():
    """--cb-num-blocks 1 (256 tokens) beside a 1,024-token context: a valid 300-token request stopped the batching
    worker, and with it the server."""
    from depthattn.serving.app import ServeOptions, paged_cache_blocks
    from tests.helpers import tiny_model

    config = tiny_model(max_position_embeddings=1024).config
    options = ServeOptions(host="127.0.0.1", port=0, served_model_name=None, continuous_batching=True,
                           cb_max_sequences=8, cb_num_blocks=1, cb_memory_gb=1.0, shutdown_grace=1.0, compile=False,
                           context_length=None, device="cpu", method_fields={})
    with pytest.raises(ValueError, match="--cb-num-blocks 1 holds 256 tokens, less than one request of the served "
                                         "context of 1024 tokens: give at least 4"):
        paged_cache_blocks(options, config, 1024)
    assert paged_cache_blocks(options, config, 256) == 1  # a served context of one block


def test_sigterm_ends_a_running_stream_within_the_grace_period(folder, tmp_path):
    server = benchmarks.serving.Server(str(folder), ["--device", "cpu", "--shutdown-grace", "1"], tmp_path / "log",
                                       threads=1)  # no fault: the stream runs until the signal
    server.wait_ready(timeout=180)
    body = json.dumps(dict(prompt="the", temperature=0, stream=True)).encode()  # no max_tokens: the whole context
    threading.Thread(target=lambda: server.post("/v1/completions", body), daemon=True).start()
    time.sleep(0.2)
    start = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0 and time.monotonic() - start < 30
    assert "Traceback" not in server.log.read_text()


@pytest.mark.parametrize("chunks", [[b'{"error": "the CB worker died"}'], [b'{"error": "the CB ', b'worker died"}']])
def test_transformers_own_errors_reach_the_client_in_openais_shape(chunks):
    """transformers' app answers some failures itself, e.g. 503 {"error": "..."} once its worker died."""
    import asyncio

    from depthattn.serving.server import RequestChecks

    async def failing_app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})

    checks = RequestChecks(failing_app, model_id="m", model_names={"m"}, listed_name="m",
                           tokenizer=word_level_tokenizer(("the", "a")), context_length=16)
    body = json.dumps({"prompt": "the", "max_tokens": 1}).encode()
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(checks({"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}, receive, send))
    assert sent[0]["status"] == 503
    answer = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert answer["error"] == {"message": "the CB worker died", "type": "server_error", "param": None, "code": None}
