"""MoDA's own behaviour (docs/method.md#baselines): the documented initialisation, the kernels it switches between,
its parameter count. What every method must do is tests/methods/test_conformance.py."""

import pytest

from depthattn.methods import DESCRIPTIONS
from tests.helpers import assert_documented_init, assert_matmul_flops_exact, extra_parameters, tiny_config

SETTINGS = dict(cross_layer="moda")
MERGED = dict(cross_layer="moda", moda_impl="merged")


@pytest.mark.parametrize("settings", [SETTINGS, MERGED], ids=["reference", "merged"])
def test_fresh_and_loaded_models_get_the_documented_init(settings, tmp_path):
    assert_documented_init(settings, lambda m: bool(0.9 < m.mlp_kv.std() / 0.02 < 1.1), tmp_path)


def test_moda_describes_the_kernels_it_switches_between():
    """MoDA's description names its kernels without importing them; they are the ones its module switches to."""
    from depthattn.ops.moda import MODA_IMPLS

    described = DESCRIPTIONS["moda"]
    assert described.switch_values["moda_impl"] == tuple(MODA_IMPLS) == described.module_class().switch_values[
        "moda_impl"]
    with pytest.raises(ValueError, match=r"moda_impl must be one of 'reference', 'merged'; got 'merge' \(did you "
                                         r"mean 'merged'\?\)"):
        tiny_config(cross_layer="moda", moda_impl="merge")


@pytest.mark.parametrize("settings", [SETTINGS, MERGED], ids=["reference", "merged"])
def test_parameter_count(settings):
    # the MLP-slot key and value projections of layers 0-2 (layer 3's is never read)
    assert extra_parameters(settings) == 3 * 2 * 16 * 32


@pytest.mark.parametrize("settings", [MERGED, dict(MERGED, num_hidden_layers=2, num_loops=2)], ids=["flat", "looped"])
def test_matmul_flops_match_the_flop_counter(settings):
    """Its sequence part in SDPA, as vanilla's (the counter does not count CPU SDPA; the reference's matmuls it
    would)."""
    assert_matmul_flops_exact(settings)


def test_flex_attention_is_refused_by_name():
    """Its block mask is no tensor: an AttributeError deep in the op, before this."""
    import torch

    from tests.helpers import tiny_model

    model = tiny_model(cross_layer="moda").eval()
    model.set_attn_implementation("flex_attention")
    with torch.no_grad(), pytest.raises(ValueError, match="not flex attention's block mask: use attn_implementation"):
        model(torch.randint(0, model.config.vocab_size, (1, 8)))
