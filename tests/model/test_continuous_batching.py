"""transformers' continuous batching (`generate_batch`, a paged KV cache) gives `generate`'s greedy tokens.

The mixed value takes the plain value's cache slot, so a paged cache needs no state of its own; the attention
passes the cache its kwargs as Qwen3 does. A looped model's paged cache holds one slot per unrolled step, as every
cache built from its config does (`DepthAttentionConfig.get_text_config`)."""

import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from tests.helpers import METHOD_SETTINGS, tiny_model

CASES = {"vanilla": dict(cross_layer="vanilla"), "depth_attention": dict(depth_stride=2),
         "depth_bias": dict(depth_stride=1, depth_score_bias=True),
         "value_residual": METHOD_SETTINGS["value_residual"], "mhc": METHOD_SETTINGS["mhc"],
         "value_embeddings": METHOD_SETTINGS["value_embeddings"], "mudd": METHOD_SETTINGS["mudd"],
         "looped_vanilla": dict(cross_layer="vanilla", num_hidden_layers=2, num_loops=2),
         "looped_depth_attention": dict(num_hidden_layers=2, num_loops=3, depth_stride=2, depth_window=1)}


@pytest.mark.parametrize("case", CASES)
def test_generate_batch_equals_generate(case):
    model = tiny_model(**CASES[case])
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16, 17], [3], [40, 41, 42]]  # mixed lengths
    expected = [model.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False, pad_token_id=0)[0, len(p):]
                .tolist() for p in prompts]
    config = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    # a small cache: sized from free memory, on a CPU it takes most of the RAM and a minute to allocate
    paged = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64)
    out = model.generate_batch(prompts, generation_config=config, continuous_batching_config=paged,
                               progress_bar=False)
    got = [out[key].generated_tokens for key in sorted(out, key=lambda k: int(k.rsplit("_", 1)[-1]))]
    assert got == expected
