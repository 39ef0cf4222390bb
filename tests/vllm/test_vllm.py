"""Serving depthattn models with vLLM (`depthattn.serving.vllm`): vLLM's greedy tokens equal depthattn's `generate` for
every conformance case (tests/helpers.py's `method_cases`: every registered method, the variants it declares, the
outside toy method, installed here by entry point) whose method the plugin serves, over mixed prompt lengths, more
requests than one batch holds, chunked prefill and prefix caching on and off, with each backbone option served by
some case, and on two tensor-parallel ranks (on CPU); a method it cannot serve is refused with its own reason (one
engine per reason; tests/methods/test_conformance.py checks every method's refusal in this process).

vLLM lives in its own venv, `.venv-vllm/`, which `make test` makes while it makes the main one, and the first test
here when it is missing (tests/vllm/setup_env.py: about a minute from a warm package cache). One driver process
(tests/vllm/driver.py) starts one engine per case, one after the other; these tests compare its tokens with
`generate` here.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from benchmarks.vllm import vllm_server
from depthattn import DepthAttentionConfig
from depthattn.data.tokenizer import word_level_tokenizer
from depthattn.loading import load_model
from depthattn.methods import METHODS
from tests.helpers import TOY, method_cases, perturb_method, registered_toy, tiny_model
from tests.methods.test_outside_method import install
from tests.vllm import setup_env

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = setup_env.PYTHON
pytestmark = pytest.mark.timeout(1200)  # making the venv, then one engine start per case

WORDS = ("the a of and to in is it that was he for on are as with his they at be this from have or by one had not "  # noqa: SIM905  (a long word list)
         "but what all were when we there can an your which their said if do will each about how up out").split()
MAX_TOKENS = 8
# head_dim 32 (vLLM's CPU attention takes 32 and 64), grouped-query attention (4 query heads, 2 KV heads)
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, max_position_embeddings=128)
# backbone options, each served with some case (in turn, over the served cases); a looped model runs 2 layers twice,
# the variants' unrolled depth
BACKBONES = [dict(), dict(k_norm_after_rope=True),
             dict(use_sliding_window=True, sliding_window=24, max_window_layers=2),
             dict(qkv_bias=True, mlp_bias=True), dict(num_hidden_layers=2, num_loops=2)]


def served_and_refused() -> tuple[dict[str, dict], dict[str, dict]]:
    """Each served case's settings (its backbone option in turn; every case the plugin serves), and per refusal
    reason one refused method at its defaults."""
    with registered_toy():
        cases = method_cases()
        served = [name for name, settings in cases.items() if not METHODS[settings["cross_layer"]].vllm_refusal]
        reasons = {METHODS[settings["cross_layer"]].vllm_refusal: name for name, settings in
                   reversed(method_cases(variants=False).items())}
    return ({name: {**cases[name], **SHAPE, **BACKBONES[i % len(BACKBONES)]} for i, name in enumerate(served)},
            {name: {**cases[name], **SHAPE} for reason, name in reasons.items() if reason})


CASES, REFUSED = served_and_refused()
PREFIX_CACHING_OFF = list(CASES)[2::2]  # served without prefix caching, the others with it
# the default method's case again on 2 ranks: heads and depth mixing sharded (every method's mixing goes through the
# same sharded path)
TENSOR_PARALLEL = (DepthAttentionConfig().cross_layer,)


def prompts(vocab_size: int) -> list[list[int]]:
    """Mixed lengths around vLLM's 32-token blocks; two share a 40-token prefix (a cached block with prefix
    caching on)."""
    rng = random.Random(0)
    words = range(4, vocab_size)  # after the special tokens and the unknown-word token
    shared = rng.choices(words, k=40)
    return [rng.choices(words, k=n) for n in (1, 5, 33, 70)] + [shared + rng.choices(words, k=3), shared + [9]]


def save_case(folder: Path, settings: dict):
    tokenizer = word_level_tokenizer(WORDS)
    tokenizer.save_pretrained(folder)
    # no end-of-sequence token: both sides generate MAX_TOKENS tokens
    model = tiny_model(vocab_size=len(tokenizer), **settings)  # SHAPE is in every case's settings
    if list(model.model.cross_layer.parameters()):
        perturb_method(model)  # away from the initialisation, as after training
    model.save_pretrained(folder)
    return model


def greedy(model, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module", autouse=True)
def vllm_venv():
    """`.venv-vllm/`, made if missing; without a package registry the tests skip with the reason."""
    setup_env.main()
    if not setup_env.STAMP.is_file():
        pytest.skip("vLLM's venv could not be made (no package registry?): python tests/vllm/setup_env.py says why")


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory):
    """The toy method registered here and installed by entry point for vLLM's processes (as another package's
    method would be): a folder for their PYTHONPATH."""
    site = tmp_path_factory.mktemp("site")
    install(site, "depthattn_toy", {"__init__.py": ""}, {TOY: "tests.methods.toy_method:ToyValueGain"})
    with registered_toy():
        yield site


@pytest.fixture(scope="module")
def cases(tmp_path_factory, toy_site):
    """Per case: its folder, its requests and its model."""
    root = tmp_path_factory.mktemp("vllm")
    made = {}
    for name, settings in {**CASES, **REFUSED}.items():
        model = save_case(root / name, settings)
        made[name] = (root / name, prompts(model.config.vocab_size), model)
    return made


@pytest.fixture(scope="module")
def server(cases):
    """`vllm serve` of the default method's case, started first so that it starts while the driver runs."""
    folder = cases[TENSOR_PARALLEL[0]][0]
    started = vllm_server(str(folder), folder / "server.log", threads=1,
                          options=["--enforce-eager", "--max-model-len", "128"])
    yield started
    started.stop()


@pytest.fixture(scope="module")
def served(cases, server, toy_site):
    """Per run name, the driver's answer and `generate`'s tokens for the same requests (computed while the driver
    runs)."""
    runs = {name: dict(folder=str(folder), prompts=requests, max_tokens=MAX_TOKENS, max_num_seqs=2,
                       max_num_batched_tokens=32, prefix_caching=name not in PREFIX_CACHING_OFF)
            for name, (folder, requests, _) in cases.items()}  # 2 sequences, prefills of 32 tokens a step
    for name in TENSOR_PARALLEL:
        runs[f"{name}-tp2"] = dict(runs[name], tensor_parallel_size=2)
    root = cases[TENSOR_PARALLEL[0]][0].parent
    job, out, log = root / "job.json", root / "out.json", root / "driver.log"
    job.write_text(json.dumps({"runs": list(runs.values())}))
    with log.open("w") as stream:
        path = os.pathsep.join(filter(None, [str(toy_site), str(ROOT), os.environ.get("PYTHONPATH")]))
        driver = subprocess.Popen([str(VLLM_PYTHON), str(ROOT / "tests" / "vllm" / "driver.py"), str(job), str(out)],
                                  stdout=stream, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": path})
        try:
            expected = {name: [greedy(model, ids) for ids in requests] for name, (_, requests, model) in cases.items()}
            assert driver.wait(timeout=840) == 0, log.read_text()[-5000:]
        finally:
            driver.kill()
    expected.update({f"{name}-tp2": expected[name] for name in TENSOR_PARALLEL})
    answers = dict(zip(runs, json.loads(out.read_text()), strict=True))
    return {name: (answers[name], expected[name]) for name in runs}


@pytest.mark.parametrize("name", [*CASES, *(f"{name}-tp2" for name in TENSOR_PARALLEL)])
def test_vllm_greedy_tokens_equal_generate(served, name):
    answer, expected = served[name]
    assert "error" not in answer, answer["error"]
    assert answer["tokens"] == expected


@pytest.mark.parametrize("name", REFUSED)
def test_a_method_the_plugin_cannot_serve_is_refused_with_its_reason(served, name):
    answer, _ = served[name]
    assert f"cross_layer={name!r} cannot be served by vLLM" in answer.get("error", ""), answer
    assert METHODS[name].vllm_refusal in answer["error"]


def test_vllm_serve_answers_completions_as_generate(server, served):
    server.wait_ready(timeout=300)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(server.folder)
    model = load_model(server.folder, device="cpu")
    for prompt in ("the one of", "when", " ".join(WORDS[:40])):
        status, answer = server.post("/v1/completions", json.dumps(dict(
            model=server.folder, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True,
            return_token_ids=True)).encode())
        assert status == 200, answer
        choice, ids = json.loads(answer)["choices"][0], tokenizer(prompt).input_ids
        assert choice["prompt_token_ids"] == ids and choice["token_ids"] == greedy(model, ids)
        # the text continues the prompt's: the words after it, each with its space
        assert prompt + choice["text"] == tokenizer.decode(ids + choice["token_ids"], skip_special_tokens=True)
