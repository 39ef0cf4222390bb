"""Depth-Attention's FLOPs per token: the analytic count (docs/method.md#inference) against FlopCounterMode, exactly,
in settings that exercise its options. Its behaviour is tested with the model (tests/model/); what every method must
do is tests/methods/test_conformance.py."""

import pytest

from depthattn.evaluate import costs
from depthattn.methods import METHODS
from tests.helpers import ELEMENTWISE, assert_matmul_flops_exact, extra_flops_per_token, state_at_context, tiny_config

SETTINGS = {  # GQA (tiny_config: 4 heads, 2 KV heads), several strides and windows, loops, both mixed states
    "defaults": dict(cross_layer="depth_attention"),
    "every-window": dict(cross_layer="depth_attention", depth_stride=1, num_hidden_layers=3),
    "stride3-window1": dict(cross_layer="depth_attention", depth_stride=3, depth_window=1, num_hidden_layers=5),
    "uniform": dict(cross_layer="depth_attention", depth_mix="uniform"),
    "mix-kv": dict(cross_layer="depth_attention", depth_mix_states="kv"),
    "mix-k": dict(cross_layer="depth_attention", depth_mix_states="k"),
    "looped": dict(cross_layer="depth_attention", num_hidden_layers=2, num_loops=3),
    "linear-every": dict(cross_layer="depth_attention", depth_mix="linear", depth_stride=1),
}


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS)
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    config = tiny_config(**settings)
    record = costs.method_costs(config)
    assert record["model_flops_per_token"]["matmul"] == 0
    # what the counter sees on top of the paper's convention, per step with sources (n candidates): the group mean
    # of the query heads (Hq * head_dim inputs) and the 1/sqrt(d) scaling of the Hkv * n scores (softmax only)
    sources = METHODS[config.cross_layer].step_sources(config)
    uncounted = 0
    if config.depth_mix == "softmax":
        uncounted = sum(config.num_attention_heads * config.head_dim + config.num_key_value_heads * (len(s) + 1)
                        for s in sources if s)
    counted = extra_flops_per_token(settings, ELEMENTWISE, ops=set(ELEMENTWISE))
    assert counted == record["model_flops_per_token"]["elementwise"] + uncounted
    assert record["model_flops_per_token"]["total"] == record["extra_flops_per_token"]


def test_state_at_context():
    assert state_at_context(SETTINGS["defaults"]) == 0  # the mixed values replace the plain ones in the cache
    # mixed keys: the plain key of a mixed source layer (layer 2 of 4, stride 2) is not in the cache (d_kv = 2 x 8)
    assert state_at_context(SETTINGS["mix-kv"]) == 1 * 1000 * 16 * 4
