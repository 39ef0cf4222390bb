"""Looped Transformers (docs/method.md#variants): the stack runs num_loops times with shared weights; depth counts
unrolled steps."""

import pytest
import torch
from transformers import DynamicCache, StaticCache

from depthattn import depth_sources
from depthattn.methods.depth_attention import resolved_depth_stride
from tests.helpers import perturb_method, prefill_then_decode, tiny_model
from tests.model.test_depth_reference import reference_logits

ATOL = 1e-5


def looped_and_unrolled(settings, dtype=torch.float32, layers=2, loops=2):
    """A looped model and the plain model of layers * loops layers whose layer u has the looped layer u % layers.

    A method's parameters are per unrolled step (same shapes in both), or per layer, shared by the loops as the
    layers' are (a looped model's leading dimension is `layers`): unrolled step u then takes the looped one's u %
    layers."""
    settings = {**settings, "num_hidden_layers": layers}
    looped = tiny_model(dtype, num_loops=loops, **settings)
    if looped.model.cross_layer is not None:
        perturb_method(looped)
    unrolled = tiny_model(dtype, **{**settings, "num_hidden_layers": layers * loops})
    shapes = {key: tensor.shape for key, tensor in unrolled.state_dict().items()}
    state = {}
    for key, tensor in looped.state_dict().items():
        if key.startswith("model.layers."):
            _, _, index, rest = key.split(".", 3)
            for loop in range(loops):
                state[f"model.layers.{loop * layers + int(index)}.{rest}"] = tensor
        elif tensor.shape != shapes[key] and len(tensor) == layers and tensor.shape[1:] == shapes[key][1:]:
            state[key] = tensor[[u % layers for u in range(shapes[key][0])]]  # per layer, shared by the loops
        else:
            state[key] = tensor
    unrolled.load_state_dict(state, strict=True)
    return looped, unrolled


def test_looped_equals_the_unrolled_stack_with_shared_weights(method_settings):
    looped, unrolled = looped_and_unrolled(method_settings)
    ids = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(looped(ids).logits, unrolled(ids).logits, rtol=0, atol=1e-6)
    assert len(looped.model.layers) == 2 and looped.config.unrolled_depth == 4


@pytest.mark.parametrize("settings", [dict(), dict(depth_stride=1, depth_mix="uniform"), dict(cross_layer="vanilla")])
def test_looped_matches_the_loop_reference_over_the_unrolled_depth(settings):
    looped, unrolled = looped_and_unrolled(settings, torch.float64, layers=2, loops=3)
    ids = torch.randint(0, 97, (1, 6))
    torch.testing.assert_close(looped(ids).logits[0], reference_logits(unrolled, ids[0]), rtol=1e-9, atol=1e-9)


def test_depth_sources_are_chosen_over_the_unrolled_depth():
    model = tiny_model(num_loops=2)  # L = 4, K = 2: default stride = 8 // 2 = 4
    assert resolved_depth_stride(model.config) == 4
    sources = model.model.cross_layer.sources  # per unrolled step
    assert sources == [[], [0], [0], [0], [0], [0, 4], [0, 4], [0, 4]]
    assert sources == [depth_sources(u, 4) for u in range(8)]
    out = model(torch.randint(0, 97, (1, 5)), output_depth_weights=True, output_hidden_states=True)
    assert [w.shape[-1] for w in out.depth_weights] == [2, 2, 2, 2, 3, 3, 3]  # steps 1-7; step 0 has no sources
    assert len(out.hidden_states) == 9


def test_looped_cached_decoding_matches_the_full_forward(method_settings):
    # in float64: dynamic weights over the unrolled steps (MUDD's) can lift float32 rounding past ATOL (1e-5 at a
    # few logits over 8 steps; 1e-14 in float64)
    model = tiny_model(torch.float64, num_loops=2, **{**method_settings, "num_hidden_layers": 2})
    if model.model.cross_layer is not None:
        perturb_method(model)
    ids = torch.randint(0, 97, (2, 11))
    full = model(ids, use_cache=False).logits
    cached, cache = prefill_then_decode(model, ids, 4)
    torch.testing.assert_close(cached, full, rtol=0, atol=ATOL)
    assert len(cache.layers) == 4  # one slot per unrolled step
    cache = DynamicCache(config=model.config)
    chunks = [model(ids[:, a:b], cache=cache, use_cache=True).logits for a, b in [(0, 3), (3, 8), (8, 11)]]
    torch.testing.assert_close(torch.cat(chunks, 1), full, rtol=0, atol=ATOL)


def test_looped_static_cache_and_generate():
    model = tiny_model(num_loops=2, depth_stride=1)
    ids = torch.randint(0, 97, (1, 9))
    cache = StaticCache(config=model.config, max_cache_len=16)
    steps = [model(ids[:, :4], cache=cache, use_cache=True).logits]
    steps += [model(ids[:, t:t + 1], cache=cache, use_cache=True).logits for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), model(ids, use_cache=False).logits, rtol=0, atol=ATOL)
    assert len(cache.layers) == 8
    prompt = ids[:, :5]
    dynamic = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
    static = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0, cache_implementation="static")
    expected = prompt
    for _ in range(5):
        expected = torch.cat([expected, model(expected, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(dynamic, expected) and torch.equal(static, expected)


def test_each_unrolled_step_has_its_own_cache_slot_of_vanilla_size():
    ids = torch.randint(0, 97, (2, 7))
    looped = tiny_model(num_loops=3)(ids, use_cache=True).cache
    vanilla = tiny_model(cross_layer="vanilla")(ids, use_cache=True).cache
    assert len(looped.layers) == 12 and len(vanilla.layers) == 4
    for step, layer in enumerate(looped.layers):
        assert layer.keys.shape == layer.values.shape == vanilla.layers[step % 4].keys.shape
    # the loops write different states: slot u and slot u + L differ
    assert not torch.allclose(looped.layers[1].keys, looped.layers[5].keys)


def test_a_cache_with_too_few_slots_is_an_error():
    vanilla = tiny_model(cross_layer="vanilla")
    cache = vanilla(torch.randint(0, 97, (1, 4)), use_cache=True).cache
    with pytest.raises(ValueError, match="needs 8 .* DynamicCache\\(config=model.config\\)"):
        tiny_model(num_loops=2)(torch.randint(0, 97, (1, 1)), cache=cache, use_cache=True)


def test_resizing_the_embeddings_records_the_vocabulary_in_the_config():
    model = tiny_model(num_loops=2)
    model.resize_token_embeddings(120, mean_resizing=False)
    assert model.config.vocab_size == 120 and model.lm_head.weight.shape[0] == 120
    assert model(torch.tensor([[119]])).logits.shape[-1] == 120
