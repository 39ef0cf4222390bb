"""transformers' continuous batching (`generate_batch`, a paged KV cache) gives `generate`'s greedy tokens, for every
conformance case (tests/helpers.py's `method_cases`), and looped for every method at its defaults; a method that
cannot run packed sequences (its `packed_refusal`) fails every request with that reason instead.

The mixed value takes the plain value's cache slot, so a paged cache needs no state of its own; the attention
passes the cache its kwargs as Qwen3 does. A looped model's paged cache holds one slot per unrolled step, as every
cache built from its config does (`DepthAttentionConfig.get_text_config`)."""

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from depthattn.methods import METHODS
from tests.helpers import perturb_method, tiny_model

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16, 17], [3], [40, 41, 42]]  # mixed lengths


def check_generate_batch(settings: dict):
    model = perturb_method(tiny_model(**settings))
    config = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    # a small cache: sized from free memory, on a CPU it takes most of the RAM and a minute to allocate
    paged = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64)
    out = model.generate_batch(PROMPTS, generation_config=config, continuous_batching_config=paged,
                               progress_bar=False)
    results = [out[key] for key in sorted(out, key=lambda k: int(k.rsplit("_", 1)[-1]))]
    if refusal := METHODS[settings["cross_layer"]].packed_refusal:
        assert [(r.generated_tokens, refusal in (r.error or "")) for r in results] == [([], True)] * len(PROMPTS)
        return
    expected = [model.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False, pad_token_id=0)[0, len(p):]
                .tolist() for p in PROMPTS]
    assert [r.generated_tokens for r in results] == expected


def test_generate_batch_equals_generate(method_settings):
    check_generate_batch(method_settings)


def test_looped_generate_batch_equals_generate(method_defaults):
    check_generate_batch({**method_defaults, "num_loops": 2})
