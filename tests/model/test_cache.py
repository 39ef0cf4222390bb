"""Cached decoding, chunked prefill and left-padded batches reproduce the uncached forward
(docs/method.md#inference)."""

import pytest
import torch
from transformers import DynamicCache, StaticCache

from tests.helpers import prefill_then_decode, tiny_model

VARIANTS = [
    dict(),
    dict(depth_stride=1, depth_window=1),
    dict(depth_stride=2, depth_mix_states="kv"),
    dict(depth_stride=2, depth_mix_states="k", num_key_value_heads=1),
    dict(depth_stride=1, depth_mix="uniform"),
    dict(cross_layer="vanilla"),
]


def ids_of(settings):
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "default"


ATOL = 1e-5


@pytest.mark.parametrize("settings", VARIANTS, ids=ids_of)
def test_token_by_token_decoding_matches_full_forward(settings):
    model = tiny_model(**settings)
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    full = model(ids, use_cache=False).logits
    cached, _ = prefill_then_decode(model, ids, 5)
    torch.testing.assert_close(cached, full, rtol=0, atol=ATOL)


@pytest.mark.parametrize("settings", VARIANTS, ids=ids_of)
def test_chunked_prefill_matches_full_forward(settings):
    model = tiny_model(**settings)
    ids = torch.randint(0, model.config.vocab_size, (2, 13))
    full = model(ids, use_cache=False).logits
    cache = DynamicCache(config=model.config)
    chunks = [model(ids[:, a:b], cache=cache, use_cache=True).logits for a, b in [(0, 4), (4, 9), (9, 10), (10, 13)]]
    torch.testing.assert_close(torch.cat(chunks, 1), full, rtol=0, atol=ATOL)


def left_pad(prompts, pad_id=0):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


@pytest.mark.parametrize("settings", VARIANTS[:4], ids=ids_of)
def test_left_padded_batch_with_cache_matches_each_prompt_alone(settings):
    model = tiny_model(**settings)
    vocab = model.config.vocab_size
    prompts = [torch.randint(1, vocab, (n,)).tolist() for n in (3, 7, 5)]
    continuation = torch.randint(1, vocab, (3, 4))
    ids, mask = left_pad(prompts)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(ids, attention_mask=mask, position_ids=positions, use_cache=True)
    logits = [out.logits[:, -1]]
    for t in range(continuation.shape[1]):
        mask = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
        positions = positions[:, -1:] + 1
        out = model(continuation[:, t:t + 1], attention_mask=mask, position_ids=positions, cache=out.cache,
                    use_cache=True)
        logits.append(out.logits[:, -1])
    for i, prompt in enumerate(prompts):
        alone = model(torch.tensor([prompt + continuation[i].tolist()]), use_cache=False).logits[0]
        expected = alone[len(prompt) - 1:]
        torch.testing.assert_close(torch.stack([step[i] for step in logits]), expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("settings", VARIANTS[:3], ids=ids_of)
def test_greedy_generate_equals_argmax_of_uncached_forward(settings):
    model = tiny_model(**settings)
    prompt = torch.randint(0, model.config.vocab_size, (1, 6))
    generated = model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
    ids = prompt
    for _ in range(10):
        next_id = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, next_id], 1)
    assert torch.equal(generated, ids)


def test_batched_generate_with_left_padding_equals_single_prompts():
    model = tiny_model(depth_stride=1)
    prompts = [torch.randint(1, model.config.vocab_size, (n,)).tolist() for n in (4, 9)]
    ids, mask = left_pad(prompts)
    batched = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    for i, prompt in enumerate(prompts):
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert batched[i, -6:].tolist() == alone[0, -6:].tolist()


def test_sampling_is_reproducible_and_in_vocabulary():
    model = tiny_model()
    prompt = torch.randint(0, model.config.vocab_size, (2, 4))
    runs = []
    for _ in range(2):
        torch.manual_seed(123)
        runs.append(model.generate(prompt, max_new_tokens=8, do_sample=True, top_k=20, temperature=0.9,
                                   pad_token_id=0))
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (2, 12)
    assert int(runs[0].max()) < model.config.vocab_size


def test_static_cache_generate_equals_dynamic():
    model = tiny_model(depth_stride=1)
    prompt = torch.randint(0, model.config.vocab_size, (2, 5))
    dynamic = model.generate(prompt, max_new_tokens=7, do_sample=False, pad_token_id=0)
    static = model.generate(prompt, max_new_tokens=7, do_sample=False, pad_token_id=0,
                            cache_implementation="static")
    assert torch.equal(dynamic, static)


def test_static_cache_decoding_matches_full_forward():
    model = tiny_model(depth_stride=1, depth_mix_states="kv")
    ids = torch.randint(0, model.config.vocab_size, (1, 9))
    cache = StaticCache(config=model.config, max_cache_len=16)
    steps = [model(ids[:, :4], cache=cache, use_cache=True).logits]
    steps += [model(ids[:, t:t + 1], cache=cache, use_cache=True).logits for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), model(ids, use_cache=False).logits, rtol=0, atol=ATOL)


def cache_tensors(cache):
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("settings", VARIANTS[:5], ids=ids_of)
def test_cache_holds_exactly_what_vanillas_holds(settings):
    ids = torch.randint(0, 97, (2, 11))
    depth = tiny_model(**settings)(ids, use_cache=True).cache
    vanilla = tiny_model(**{**settings, "cross_layer": "vanilla"})(ids, use_cache=True).cache
    depth_tensors, vanilla_tensors = cache_tensors(depth), cache_tensors(vanilla)
    assert len(depth_tensors) == len(vanilla_tensors) == 2 * 4
    for d, v in zip(depth_tensors, vanilla_tensors, strict=True):
        assert (d.shape, d.dtype) == (v.shape, v.dtype)
    assert sum(t.nbytes for t in depth_tensors) == sum(t.nbytes for t in vanilla_tensors)


def test_cache_stores_the_mixed_values_and_plain_keys():
    model = tiny_model(depth_stride=1)
    ids = torch.randint(0, 97, (1, 6))
    cache = model(ids, use_cache=True).cache
    vanilla_cache = tiny_model(cross_layer="vanilla")(ids, use_cache=True).cache
    # layer 0 has no sources: identical; above it, keys of layer 1 are plain, values mixed
    assert torch.equal(cache.layers[0].values, vanilla_cache.layers[0].values)
    assert not torch.allclose(cache.layers[1].values, vanilla_cache.layers[1].values)


def test_paged_cache_bytes_count_every_unrolled_steps_keys_and_values():
    from depthattn.serving.cache import paged_cache_bytes, paged_cache_config

    config = tiny_model().config
    paged = paged_cache_config(config, max_sequences=2, context=300, page_size=100)
    per_token = 2 * config.unrolled_depth * config.num_key_value_heads * config.head_dim * 4
    assert paged.num_blocks == 6 and paged_cache_bytes(config, paged) == 6 * 100 * per_token


def test_paged_cache_bytes_refuse_a_cache_sized_from_free_memory():
    from transformers import ContinuousBatchingConfig

    from depthattn.serving.cache import paged_cache_bytes

    with pytest.raises(ValueError, match="sets no num_blocks .* make it with paged_cache_config"):
        paged_cache_bytes(tiny_model().config, ContinuousBatchingConfig())
