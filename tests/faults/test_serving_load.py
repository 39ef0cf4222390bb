"""The server under load (benchmarks/serving_load.py, short): concurrent clients mixing good requests, bad ones
and disconnects mid-stream against continuous batching; good requests get generate's text, bad ones a 4xx, and the
server stays healthy."""

import pytest

import benchmarks.serving
from benchmarks.serving_load import expected_texts, run_load
from tests.test_serve import CONTEXT, save_model_folder

pytest.importorskip("uvicorn", reason='needs the serve extra: pip install "depthattn[serve]"')

PROMPTS = ["the cat sat on", "when we see them", "a", "it was the first time that he"]


def test_no_5xx_for_bad_input_and_no_dead_worker_under_concurrent_load(tmp_path):
    save_model_folder(tmp_path / "model", depth_stride=1)
    folder = str(tmp_path / "model")
    expected = expected_texts(folder, PROMPTS, 6)
    server = benchmarks.serving.Server(folder, ["--device", "cpu", "--continuous-batching"], tmp_path / "log",
                                       threads=1)
    try:
        server.wait_ready(timeout=180)
        result = run_load(server, clients=4, seconds=6, prompts=PROMPTS, expected=expected, max_tokens=6,
                          context=CONTEXT)
    finally:
        server.stop()
    assert result["passed"], result
    kinds = {name.split(" (")[0] for name in result["counts"]}
    assert {"good", "malformed JSON", "disconnect mid-stream"} <= kinds  # the mix was sent
