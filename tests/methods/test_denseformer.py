"""DenseFormer's own behaviour (docs/method.md#baselines): it starts as the identity (exactly vanilla), its parameter
count. What every method must do is tests/methods/test_conformance.py."""

import pytest
import torch

from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    extra_parameters,
    fixed_weight_flops,
    perturb_method,
    state_at_context,
    vanilla_and,
)

SETTINGS = dict(cross_layer="denseformer")  # 4 layers: a DWA after every block
DILATED = dict(cross_layer="denseformer", denseformer_dilation=2, denseformer_period=2)


def test_a_model_loaded_from_a_vanilla_checkpoint_is_that_model(tmp_path):
    vanilla, loaded = assert_documented_init(SETTINGS, lambda method: True, tmp_path)  # identity: by behaviour
    ids = torch.randint(0, 97, (2, 7))
    assert torch.equal(loaded(ids).logits, vanilla(ids).logits)


@pytest.mark.parametrize("settings", [SETTINGS, DILATED], ids=["every-block", "k2p2"])
def test_at_identity_init_is_exactly_vanilla(settings):
    vanilla, model = vanilla_and(settings)
    ids = torch.randint(0, 97, (2, 10))
    assert torch.equal(model(ids).logits, vanilla(ids).logits)
    assert not torch.equal(perturb_method(model)(ids).logits, vanilla(ids).logits)


def test_parameter_count():
    assert extra_parameters(SETTINGS) == 4 * 7 // 2  # L(L+3)/2
    assert extra_parameters(DILATED) == (2 // 2 + 1) + (4 // 2 + 1)  # DWAs after blocks 2 and 4


@pytest.mark.parametrize("settings", [SETTINGS, DILATED, dict(cross_layer="denseformer", num_hidden_layers=2,
                                                              num_loops=2)], ids=["every-block", "k2p2", "looped"])
def test_flops_match_the_flop_counter(settings):
    """Its weights are parameters: the mixing is all there is to count."""
    assert_matmul_flops_exact(settings)
    counted, mixing, _ = fixed_weight_flops(settings, lambda method: None)
    assert counted == mixing


def test_state_at_context():
    assert state_at_context(SETTINGS) == 4 * 1000 * 32 * 4  # T x L hidden vectors
    assert state_at_context(DILATED) == 2 * 1000 * 32 * 4
