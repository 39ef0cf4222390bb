"""Block AttnRes's own behaviour (docs/method.md#baselines): its documented initialisation, how it starts, its
parameter count. What every method must do is tests/methods/test_conformance.py; its parity with fla-core's
aggregator tests/methods/test_attnres_parity.py."""

import math

import pytest
import torch

from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    extra_parameters,
    fixed_weight_flops,
    flop_weights,
    method_model,
    state_at_context,
)

SETTINGS = dict(cross_layer="attnres", attnres_block_size=3)  # 8 sublayers: snapshots after 3 and 6


def test_fresh_and_loaded_models_get_the_documented_init(tmp_path):
    assert_documented_init(SETTINGS, lambda m: bool(
        (m.query == 0).all() and (m.gain == 1).all() and (m.recency_bias == 3).all()), tmp_path)


def test_attnres_starts_with_the_recency_bias_weights():
    attnres = method_model(SETTINGS, perturbed=False).model.cross_layer
    assert [attnres.snapshot_count(s) for s in range(9)] == [0, 1, 1, 1, 2, 2, 2, 3, 3]
    candidates = torch.randn(3, 2, 4, 32)  # two snapshots and the running stream
    weights = attnres.weights(candidates, 5)
    expected = torch.tensor([1.0, 1.0, math.e**3]) / (2 + math.e**3)
    torch.testing.assert_close(weights, expected[:, None, None].expand(3, 2, 4))


def test_parameter_count():
    assert extra_parameters(SETTINGS) == 8 * (2 * 32 + 1)  # per aggregator: query, gain, recency bias


def fix_weights(method):
    fixed = {n: flop_weights(n).permute(2, 0, 1) for n in range(1, 64)}  # (n, B, T) per number of candidates
    method.weights = lambda candidates, sublayer: fixed[candidates.shape[0]]


@pytest.mark.parametrize("settings", [SETTINGS, dict(cross_layer="attnres", attnres_block_size=5, num_hidden_layers=2,
                                                     num_loops=2)], ids=["flat", "looped"])
def test_flops_match_the_flop_counter(settings):
    """The mixing with the weights held fixed (their logits, norms and softmax are not counted)."""
    assert_matmul_flops_exact(settings)
    counted, mixing, _ = fixed_weight_flops(settings, fix_weights)
    assert counted == mixing


def test_state_at_context():
    assert state_at_context(SETTINGS) == 3 * 1000 * 32 * 4  # snapshots at 0, 3, 6
