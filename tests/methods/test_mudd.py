"""MUDDFormer's own behaviour (docs/method.md#baselines): the documented initialisation (exactly vanilla), the query,
key and value ways, the parameter count. What every method must do is tests/methods/test_conformance.py."""

import pytest
import torch

from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    extra_parameters,
    fixed_weight_flops,
    flop_weights,
    perturb_method,
    state_at_context,
    vanilla_and,
)

SETTINGS = dict(cross_layer="mudd")  # 4 layers: a dynamic dense connection after every block


def documented_init(m) -> bool:
    """Per block: the output projection at zero and the static weights on the latest state only, the input projection
    at the usual scale."""
    def holds(block):
        proj_in, proj_out, static = m.block_parameters(block)
        return bool((proj_out == 0).all() and torch.equal(static[:, -1], torch.ones(static.shape[0]))
                    and (static[:, :-1] == 0).all() and 0.8 < proj_in.std() * 32 ** 0.5 < 1.2)
    return all(holds(block) for block in range(1, 5))


def test_fresh_and_loaded_models_get_the_documented_init_which_is_vanilla(tmp_path):
    vanilla, loaded = assert_documented_init(SETTINGS, documented_init, tmp_path)
    ids = torch.randint(0, 97, (2, 7))
    assert torch.equal(loaded(ids).logits, vanilla(ids).logits)


def test_at_identity_init_is_exactly_vanilla():
    vanilla, model = vanilla_and(SETTINGS)
    ids = torch.randint(0, 97, (2, 10))
    assert torch.equal(model(ids).logits, vanilla(ids).logits)
    assert not torch.equal(perturb_method(model)(ids).logits, vanilla(ids).logits)


def test_mudd_reads_queries_keys_and_values_from_their_own_ways():
    vanilla, model = vanilla_and(SETTINGS)
    mudd = model.model.cross_layer
    ids = torch.randint(0, 97, (2, 10))
    for way in range(3):  # a dynamic weight on one way only changes the output
        with torch.no_grad():
            for block in range(1, 4):
                _, proj_out, _ = mudd.block_parameters(block)
                proj_out.zero_()
                proj_out.view(proj_out.shape[0], 4, -1)[:, way].normal_(0, 1)
        assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-3, way
    x = torch.randn(2, 5, 32)
    assert mudd.weights(x, 1).shape == (2, 5, 4, 2) and mudd.weights(x, 4).shape == (2, 5, 1, 5)


def test_parameter_count():
    # after block i of 4: C = 4 ways (1 after the last), n = i + 1 sources, K = C n (4 C n after the last)
    assert extra_parameters(SETTINGS) == sum(32 * K + K * C * n + C * n
                                             for C, n, K in [(4, 2, 8), (4, 3, 12), (4, 4, 16), (1, 5, 20)])


def fix_weights(method):
    fixed = {(C, n): flop_weights(C, n) for C in (1, 4) for n in range(2, 64)}
    method.weights = lambda x, block: fixed[tuple(method.block_parameters(block)[2].shape)]


@pytest.mark.parametrize("settings", [SETTINGS, dict(cross_layer="mudd", num_hidden_layers=2, num_loops=2)],
                         ids=["flat", "looped"])
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    counted, mixing, config = fixed_weight_flops(settings, fix_weights)
    # the keys' and values' own inputs pass the attention norm too (mean D, 2 D multiplies, + eps), in every block
    # but the first; norms are not counted
    assert counted == mixing + 2 * (config.unrolled_depth - 1) * (3 * config.hidden_size + 1)


def test_state_at_context():
    assert state_at_context(SETTINGS) == (4 + 3) * 1000 * 32 * 4  # X_0 .. X_3 and the q, k, v ways
