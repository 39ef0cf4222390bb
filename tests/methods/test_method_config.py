"""Method settings in the config, and the named presets that training configs use."""

import pytest
import torch

from depthattn import METHOD_PRESETS, DepthAttentionConfig, DepthAttentionForCausalLM, method_settings
from depthattn.methods.depth_attention import resolved_depth_stride
from tests.helpers import tiny_config


@pytest.mark.parametrize("bad, field", [
    (dict(cross_layer="densformer"), "cross_layer"),
    (dict(num_loops=0), "num_loops"),
    (dict(num_loops=1.5), "num_loops"),
    (dict(num_loops=True), "num_loops"),
    (dict(denseformer_dilation=0), "denseformer_dilation"),
    (dict(denseformer_period=-1), "denseformer_period"),
    (dict(attnres_block_size=0), "attnres_block_size"),
    (dict(attnres_sources="block"), "attnres_sources"),
    (dict(attnres_recency_bias="yes"), "attnres_recency_bias"),
    (dict(attnres_impl="triton"), "attnres_impl"),
    (dict(attnres_impl="fla"), "attnres_recency_bias false"),  # the kernels have no recency bias
    (dict(mhc_impl="fused"), "mhc_impl"),
    (dict(mhc_impl="liger", mhc_streams=3), "mhc_streams a power of two"),  # Liger-Kernel's kernels
    (dict(mhc_streams=1), "mhc_streams"),
    (dict(mhc_sinkhorn_iters=0), "mhc_sinkhorn_iters"),
    (dict(mhc_alpha_init=-0.1), "mhc_alpha_init"),
    (dict(mhc_alpha_init="small"), "mhc_alpha_init"),
    (dict(mhc_alpha_init=float("inf")), "mhc_alpha_init"),
    (dict(hc_streams=0), "hc_streams"),
])
def test_bad_method_values_name_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**bad)


def test_errors_state_the_allowed_values():
    with pytest.raises(ValueError, match=r"'denseformer', 'attnres', 'mhc', 'hyper_connections'"):
        tiny_config(cross_layer="mHC")
    with pytest.raises(ValueError, match=">= 2"):
        tiny_config(mhc_streams=1)


def test_unknown_method_keys_are_still_rejected():
    with pytest.raises(ValueError, match="did you mean 'mhc_streams'"):
        tiny_config(mhc_stream=4)


def test_method_fields_round_trip(tmp_path):
    config = tiny_config(cross_layer="mhc", num_loops=2, mhc_streams=3, mhc_sinkhorn_iters=7, mhc_alpha_init=0.05,
                         denseformer_dilation=2, attnres_block_size=5, hc_streams=2)
    config.save_pretrained(tmp_path)
    assert DepthAttentionConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()
    assert config.unrolled_depth == 8 and resolved_depth_stride(config) == 4
    assert resolved_depth_stride(tiny_config(num_loops=3, num_hidden_layers=4)) == 6


@pytest.mark.parametrize("loops", [1, 2])
def test_stride_presets_are_fractions_of_the_unrolled_depth(loops):
    depth = 8 * loops
    stride = {name: method_settings(name, 8, loops)["depth_stride"]
              for name in ("depth_first_layer", "depth_half", "depth_quarter", "depth_every", "depth_attention")}
    assert stride == {"depth_first_layer": depth, "depth_half": depth // 2, "depth_quarter": depth // 4,
                      "depth_every": 1, "depth_attention": depth // 2}
    config = tiny_config(num_hidden_layers=8, **method_settings("depth_first_layer", 8, loops))
    model = DepthAttentionForCausalLM(config)
    assert all(sources in ([], [0]) for sources in model.model.cross_layer.sources)


def test_mixing_presets():
    assert method_settings("depth_uniform", 4)["depth_mix"] == "uniform"
    assert [method_settings(f"depth_mix_{s}", 4)["depth_mix_states"] for s in ("k", "kv", "v")] == ["k", "kv", "v"]
    assert method_settings("vanilla", 4) == {"cross_layer": "vanilla", "num_loops": 1}
    assert method_settings("mhc", 4, 2) == {"cross_layer": "mhc", "num_loops": 2}


@pytest.mark.parametrize("name", METHOD_PRESETS)
def test_every_preset_builds_a_model_that_runs(name):
    config = tiny_config(**method_settings(name, 4))
    model = DepthAttentionForCausalLM(config).eval()
    logits = model(torch.randint(0, 97, (1, 5))).logits
    assert logits.shape == (1, 5, 97) and torch.isfinite(logits).all()


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="'depth_quarter'"):
        method_settings("depth_quater", 4)
