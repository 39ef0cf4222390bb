"""Value residual's own behaviour (docs/method.md#baselines): its documented initialisation, the Depth-Attention
ablation it starts as, its parameter count. What every method must do is tests/methods/test_conformance.py."""

import pytest
import torch

from depthattn.evaluate import costs
from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    assert_value_sum_flops,
    extra_parameters,
    tiny_config,
    tiny_model,
    vanilla_and,
    with_backbone_of,
)

SETTINGS = dict(cross_layer="value_residual")  # 4 layers: layers 1-3 mix in layer 0's values


def test_fresh_and_loaded_models_get_the_documented_init(tmp_path):
    assert_documented_init(SETTINGS, lambda m: bool((m.lambdas == 0.5).all() and m.lambdas.shape == (3, 2)), tmp_path)


def test_value_residual_starts_as_the_uniform_first_layer_depth_ablation():
    """lambda = (0.5, 0.5): V'_l = (V_0 + V_l) / 2, i.e. Depth-Attention with source {0} and a uniform mix."""
    vanilla, model = vanilla_and(SETTINGS)
    ablation = with_backbone_of(tiny_model(depth_stride=4, depth_mix="uniform"), vanilla)
    ids = torch.randint(0, 97, (2, 10))
    torch.testing.assert_close(model(ids).logits, ablation(ids).logits, rtol=0, atol=1e-6)
    assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-2
    with torch.no_grad():  # lambda = (0, 1) turns it off
        model.model.cross_layer.lambdas.copy_(torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=1e-6)


def test_parameter_count():
    assert extra_parameters(SETTINGS) == 2 * 3  # two lambdas for each of layers 1-3


LOOPED = dict(cross_layer="value_residual", num_hidden_layers=2, num_loops=2)


@pytest.mark.parametrize("settings", [SETTINGS, LOOPED], ids=["flat", "looped"])
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    assert_value_sum_flops(settings)


def test_value_residual_costs_as_depth_attention_uniform_from_layer_0():
    """At initialisation value residual is Depth-Attention with uniform weights and layer 0 as only source."""
    value = costs.method_costs(tiny_config(**SETTINGS, num_hidden_layers=6))
    depth = costs.method_costs(tiny_config(cross_layer="depth_attention", depth_mix="uniform", depth_stride=6,
                                           num_hidden_layers=6))
    for key in ("extra_flops_per_token", "extra_io_bytes_per_token", "extra_state_bytes_at_context"):
        assert value[key] == depth[key], key
