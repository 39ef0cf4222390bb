"""Value embeddings' own behaviour (docs/method.md#baselines): the documented initialisation, a table row mixed into
the chosen steps' values, the pattern, the parameter count. What every method must do is
tests/methods/test_conformance.py."""

import pytest
import torch

from depthattn.evaluate import costs
from tests.helpers import (
    assert_documented_init,
    assert_matmul_flops_exact,
    assert_value_sum_flops,
    extra_parameters,
    method_model,
    tiny_config,
    vanilla_and,
)

SETTINGS = dict(cross_layer="value_embeddings")  # tables on steps 0, 1, 2, 3: "0101"
PATTERN = dict(cross_layer="value_embeddings", value_embedding_pattern=".0.1")  # steps 1 and 3, tables 0 and 1


@pytest.mark.parametrize("settings", [SETTINGS, PATTERN], ids=["speedrun", "pattern"])
def test_fresh_and_loaded_models_get_the_documented_init(settings, tmp_path):
    assert_documented_init(settings, lambda m: bool((m.lambdas == 0.5).all() and 0.9 < m.tables.std() / 0.02 < 1.1),
                           tmp_path)


def test_value_embeddings_mix_a_table_row_of_each_token_into_the_chosen_values():
    vanilla, model = vanilla_and(PATTERN)
    ve = model.model.cross_layer
    assert ve.tables.shape == (2, 97, 16) and ve.lambdas.shape == (2, 2)
    ids = torch.randint(0, 97, (2, 10))
    assert (model(ids).logits - vanilla(ids).logits).abs().max() > 1e-3
    with torch.no_grad():  # lambda = (1, 0) turns it off
        ve.lambdas.copy_(torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=1e-6)
    with torch.no_grad():  # with the row of token t set, V' of step 1 is exactly that row wherever t occurs
        ve.lambdas.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
        ve.tables[0, 5] = torch.arange(16.0)
    cache = model(torch.tensor([[5, 7, 5]]), use_cache=True).cache
    values = cache.layers[1].values  # (1, Hkv, T, d): the mixed values
    assert torch.equal(values[0, :, 0].flatten(), torch.arange(16.0)) and torch.equal(values[0, :, 2], values[0, :, 0])


def test_value_embeddings_need_token_ids_and_a_valid_pattern():
    model = method_model(SETTINGS)
    with pytest.raises(ValueError, match="token ids"):
        model(inputs_embeds=torch.randn(1, 3, 32))
    for bad in ("0.1", "01x1", "1.1.", 12):
        with pytest.raises(ValueError, match="value_embedding_pattern"):
            tiny_config(cross_layer="value_embeddings", value_embedding_pattern=bad)
    from depthattn.methods.value_embeddings import speedrun_pattern
    assert speedrun_pattern(12) == "012......012"
    assert speedrun_pattern(8) == "012..012"
    assert speedrun_pattern(4) == "0101"


def test_parameter_count():
    # tables: 2 x vocab x d_kv; two lambdas per chosen step
    assert extra_parameters(SETTINGS) == 2 * 97 * 16 + 2 * 4
    assert extra_parameters(PATTERN) == 2 * 97 * 16 + 2 * 2


@pytest.mark.parametrize("settings", [SETTINGS, dict(cross_layer="value_embeddings", value_embedding_pattern="0..1")],
                         ids=["speedrun", "pattern"])
def test_flops_match_the_flop_counter(settings):
    assert_matmul_flops_exact(settings)
    assert_value_sum_flops(settings)


def test_costs():
    small, large = (costs.method_costs(tiny_config(**SETTINGS, vocab_size=v)) for v in (97, 970))
    assert large["params_extra"] - small["params_extra"] == 2 * (970 - 97) * 16  # "0101": two tables of d_kv = 16
    assert small["value_embedding_tables"] == 2 and small["value_embedding_steps"] == [0, 1, 2, 3]
    assert small["extra_state_bytes_at_context"] == 0
