"""The learned parts of a depth mix (`model.cross_layer.learned_mix`): the opt-in score bias, zero-initialised, and
the linear rule's weights, starting at the plain average; trained, cached, saved, and the same in every path."""

import pytest
import torch

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM, count_parameters
from tests.helpers import prefill_then_decode, tiny_config, tiny_model


def biased_model(seed=0, **overrides):
    overrides = {"depth_score_bias": overrides.get("depth_mix") != "linear", **overrides}
    model = tiny_model(depth_stride=1, **overrides)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        learned = model.model.cross_layer.learned_mix
        learned.copy_(torch.randn(learned.shape, generator=generator))
    return model


def test_starts_as_plain_depth_attention_and_learns():
    plain = tiny_model(depth_stride=1)
    biased = tiny_model(depth_stride=1, depth_score_bias=True)
    missing, unexpected = biased.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing == ["model.cross_layer.learned_mix"]
    method = biased.model.cross_layer
    assert (method.learned_mix == 0).all()
    ids = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(biased(ids).logits, plain(ids).logits, atol=1e-6, rtol=0)
    biased(ids, labels=ids).loss.backward()
    grads = [method.learned_mix.grad[method.mix_slices[u]] for u in range(1, 4)]  # layers 1-3: n = 2, 3, 4
    assert [g.numel() for g in grads] == [2, 3, 4] and all(g.abs().sum() > 0 for g in grads)
    assert count_parameters(biased)["extra_over_vanilla"] == 9


def test_linear_starts_as_the_plain_average_and_learns_weights_of_any_sum():
    uniform = tiny_model(depth_stride=1, depth_mix="uniform")
    linear = tiny_model(depth_stride=1, depth_mix="linear")
    linear.load_state_dict(uniform.state_dict(), strict=False)
    method = linear.model.cross_layer
    assert [method.learned_mix[method.mix_slices[u]].tolist() for u in (1, 3)] == [[0.5, 0.5], [0.25] * 4]
    ids = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(linear(ids).logits, uniform(ids).logits, atol=1e-6, rtol=0)
    with torch.no_grad():
        method.learned_mix.mul_(3.0)  # weights summing to 3: no normalisation undoes it
    weights = linear(ids, output_depth_weights=True).depth_weights
    torch.testing.assert_close(weights[2].sum(-1), torch.full((2, 2, 9), 3.0))
    with pytest.raises(ValueError, match="no scores to bias"):
        tiny_config(depth_mix="linear", depth_score_bias=True)


@pytest.mark.parametrize("settings", [dict(), dict(depth_mix="uniform"), dict(depth_mix="linear"), dict(num_loops=2)],
                         ids=["softmax", "uniform", "linear", "looped"])
def test_paths_agree_and_cached_decoding_equals_the_full_forward(settings):
    ids = torch.randint(0, 97, (2, 10))
    models = {impl: biased_model(depth_impl=impl, **settings) for impl in ("reference", "compiled")}
    outputs = {}
    for impl, model in models.items():
        logits = model(ids).logits
        (logits.square().mean()).backward()
        outputs[impl] = logits, {n: p.grad for n, p in model.named_parameters()}
        cached, _ = prefill_then_decode(model, ids, 4)
        torch.testing.assert_close(cached, logits, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(outputs["compiled"][0], outputs["reference"][0], atol=2e-5, rtol=2e-5)
    for name, grad in outputs["reference"][1].items():
        torch.testing.assert_close(outputs["compiled"][1][name], grad, atol=2e-5, rtol=2e-5, msg=name)


def test_saved_and_reloaded(tmp_path):
    model = biased_model()
    model.save_pretrained(tmp_path)
    reloaded = DepthAttentionForCausalLM.from_pretrained(tmp_path)
    ids = torch.randint(0, 97, (1, 6))
    assert torch.equal(reloaded(ids).logits, model(ids).logits)


@pytest.mark.parametrize("settings, message", [
    (dict(depth_score_bias=1), "depth_score_bias must be true or false"),
    (dict(depth_score_bias=True, depth_impl="triton"), "not in the Triton kernels"),
    (dict(depth_mix="linear", depth_impl="triton"), "not in the Triton kernels"),
])
def test_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**settings)
    assert isinstance(tiny_config(depth_score_bias=True), DepthAttentionConfig)
