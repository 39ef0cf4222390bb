"""The opt-in learned depth-score bias: zero-initialised, trained, cached, saved, and the same in every path."""

import pytest
import torch

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM, count_parameters
from tests.helpers import prefill_then_decode, tiny_config, tiny_model


def biased_model(seed=0, **overrides):
    model = tiny_model(depth_score_bias=True, depth_stride=1, **overrides)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "depth_score_bias" in name:
                param.copy_(torch.randn(param.shape, generator=generator))
    return model


def test_starts_as_plain_depth_attention_and_learns():
    plain = tiny_model(depth_stride=1)
    biased = tiny_model(depth_stride=1, depth_score_bias=True)
    missing, unexpected = biased.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all("depth_score_bias" in key for key in missing)
    assert all((p == 0).all() for n, p in biased.named_parameters() if "depth_score_bias" in n)
    ids = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(biased(ids).logits, plain(ids).logits, atol=1e-6, rtol=0)
    biased(ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in biased.named_parameters() if "depth_score_bias" in n]
    assert len(grads) == 3 and all(g is not None and g.abs().sum() > 0 for g in grads)  # layers 1-3: n = 2, 3, 4
    assert [g.numel() for g in grads] == [2, 3, 4]
    assert count_parameters(biased)["extra_over_vanilla"] == 9


@pytest.mark.parametrize("settings", [dict(), dict(depth_mix="uniform"), dict(num_loops=2)],
                         ids=["softmax", "uniform", "looped"])
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
])
def test_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**settings)
    assert isinstance(tiny_config(depth_score_bias=True), DepthAttentionConfig)
