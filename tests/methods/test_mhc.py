"""mHC's own behaviour (docs/method.md#baselines): its documented initialisation, how it starts, its doubly stochastic
residual mix, its parameter count. What every method must do is tests/methods/test_conformance.py; its parity with
the paper's reference tests/methods/test_mhc_parity.py."""

import pytest
import torch

from depthattn.evaluate import costs
from depthattn.ops.mhc import sinkhorn
from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    extra_parameters,
    fixed_stream_coefficients,
    fixed_weight_flops,
    method_model,
    state_at_context,
    tiny_config,
    vanilla_and,
)

SETTINGS = dict(cross_layer="mhc", mhc_streams=3)  # 4 layers = 8 sublayers
ATOL = 1e-5


def test_fresh_and_loaded_models_get_the_documented_init(tmp_path):
    assert_documented_init(SETTINGS, lambda m: bool(
        (m.alpha == 0.01).all() and torch.allclose(torch.sigmoid(m.bias[:, :m.num_streams]), torch.tensor(1 / 3))
        and (m.bias[:, m.num_streams:] == 0).all() and (m.final_logits == 0).all()
        and 0.9 < m.phi.std() / 0.02 < 1.1), tmp_path)


def test_mhc_starts_near_a_plain_residual_and_exactly_at_alpha_zero():
    ids = torch.randint(0, 97, (2, 10))
    vanilla, model = vanilla_and(SETTINGS)
    difference = (model(ids).logits - vanilla(ids).logits).abs().max()
    assert 0 < difference < 1e-3  # alpha = 0.01: the dynamic mappings are live but small
    vanilla, model = vanilla_and(SETTINGS, mhc_alpha_init=0.0)
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=ATOL)


@pytest.mark.parametrize("perturbed", [False, True])
def test_mhc_residual_mix_is_doubly_stochastic(perturbed):
    mhc = method_model(SETTINGS, perturbed=perturbed).model.cross_layer  # 20 Sinkhorn iterations
    streams = torch.randn(2, 5, 3, 32)
    for sublayer in range(mhc.num_sublayers):
        pre, post, res = mhc.coefficients(streams, sublayer)
        assert (res >= 0).all() and (pre > 0).all() and (post > 0).all() and res.shape == (2, 5, 3, 3)
        torch.testing.assert_close(res.sum(-1), torch.ones(2, 5, 3), rtol=0, atol=1e-6)
        torch.testing.assert_close(res.sum(-2), torch.ones(2, 5, 3), rtol=0, atol=1e-6)
    assert torch.allclose(sinkhorn(torch.zeros(3, 3), 1), torch.full((3, 3), 1 / 3))


def test_left_padded_batch_generation_with_a_hidden_state_method():
    model = method_model(SETTINGS)
    prompts = [torch.randint(1, 97, (n,)).tolist() for n in (3, 6)]
    ids = torch.tensor([[0] * 3 + prompts[0], prompts[1]])
    mask = (torch.arange(6)[None] >= torch.tensor([[3], [0]])).long()
    batched = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    for i, prompt in enumerate(prompts):
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert batched[i, -4:].tolist() == alone[0, -4:].tolist()


def test_parameter_count():
    # per sublayer: phi (2n + n^2) x (nD + 1 bias), alpha (3); the final stream logits (n)
    assert extra_parameters(SETTINGS) == 8 * ((2 * 3 + 9) * (3 * 32 + 1) + 3) + 3


@pytest.mark.parametrize("settings", [SETTINGS, dict(cross_layer="mhc", num_hidden_layers=2, num_loops=2)],
                         ids=["flat", "looped"])
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    counted, mixing, config = fixed_weight_flops(settings, fixed_stream_coefficients)
    # the multi-stream write replaces vanilla's residual add (D per sublayer), which the convention keeps
    assert counted == mixing - 2 * config.unrolled_depth * config.hidden_size


def test_state_at_context():
    assert state_at_context(SETTINGS) == 2 * 1000 * 32 * 4  # n - 1 extra streams


def test_loops_scale_the_unrolled_depth():
    flat = costs.method_costs(tiny_config(**SETTINGS, num_hidden_layers=4), context=100)
    looped = costs.method_costs(tiny_config(**SETTINGS, num_hidden_layers=2, num_loops=2), context=100)
    for key in ("params_extra", "extra_io_bytes_per_token", "kv_cache_bytes_per_token", "extra_state_bytes_at_context"):
        assert flat[key] == looped[key], key
    assert flat["params_total"] > looped["params_total"]  # the looped backbone has half the layers
