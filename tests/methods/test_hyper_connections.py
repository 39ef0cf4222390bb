"""Hyper-connections' own behaviour (docs/method.md#baselines): the documented initialisation, the static residual
they start as, their parameter count. What every method must do is tests/methods/test_conformance.py; their parity
with the paper's reference tests/methods/test_hyper_connections_parity.py."""

import pytest
import torch

from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    extra_parameters,
    fixed_stream_coefficients,
    fixed_weight_flops,
    vanilla_and,
)

SETTINGS = dict(cross_layer="hyper_connections", hc_streams=3)  # 4 layers = 8 sublayers


def test_fresh_and_loaded_models_get_the_documented_init(tmp_path):
    assert_documented_init(SETTINGS, lambda m: bool(
        (m.scales == 0.01).all() and (m.w_pre == 0).all() and (m.w_post == 0).all() and (m.w_res == 0).all()
        and (m.gain == 1).all() and (m.static_post == 1).all()
        and torch.equal(m.static_res, torch.eye(3).expand_as(m.static_res))
        and torch.equal(m.static_pre.argmax(-1), torch.arange(8) % 3) and (m.static_pre.sum(-1) == 1).all()),
        tmp_path)


def test_hyper_connections_start_as_the_static_residual_and_near_vanilla():
    vanilla, model = vanilla_and(SETTINGS)
    hc = model.model.cross_layer
    pre, post, res = hc.coefficients(torch.randn(2, 4, 3, 32), 4)
    assert torch.equal(pre, torch.tensor([0.0, 1.0, 0.0]).expand(2, 4, 3))  # e_{4 mod 3}
    assert torch.equal(post, torch.ones(2, 4, 3)) and torch.equal(res, torch.eye(3).expand(2, 4, 3, 3))
    ids = torch.randint(0, 97, (2, 10))
    # identical streams; the final sum is 3x the vanilla hidden state, which the final RMSNorm undoes up to eps
    assert (model(ids).logits - vanilla(ids).logits).abs().max() < 1e-2


def test_parameter_count():
    assert extra_parameters(SETTINGS) == 8 * (32 * (3 + 3) + 2 + 2 * 3 + 9)


@pytest.mark.parametrize("settings", [SETTINGS, dict(cross_layer="hyper_connections", hc_streams=1,
                                                     num_hidden_layers=2, num_loops=2)], ids=["flat", "n1-looped"])
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    counted, mixing, config = fixed_weight_flops(settings, fixed_stream_coefficients)
    # the multi-stream write replaces vanilla's residual add (D per sublayer), which the convention keeps
    assert counted == mixing - 2 * config.unrolled_depth * config.hidden_size
