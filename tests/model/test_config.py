import pytest
import torch
from transformers import AutoModelForCausalLM

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM
from depthattn.methods.depth_attention import resolved_depth_stride
from depthattn.ops.depth_mix import depth_mix_compiled, depth_mix_reference
from depthattn.ops.moda import MODA_IMPLS
from tests.helpers import tiny_config, tiny_model


def test_defaults():
    config = tiny_config(num_hidden_layers=24)
    assert config.cross_layer == "depth_attention"
    assert config.depth_stride is None and resolved_depth_stride(config) == 12
    assert config.depth_window == 0 and config.depth_mix == "softmax" and config.depth_mix_states == "v"
    assert resolved_depth_stride(tiny_config(num_hidden_layers=1)) == 1
    assert config.head_dim == 8 and config.rope_parameters["rope_theta"] == config.rope_theta == 10000.0


def test_round_trip(tmp_path):
    config = tiny_config(depth_stride=3, depth_window=1, depth_mix="uniform", depth_mix_states="kv")
    config.save_pretrained(tmp_path)
    loaded = DepthAttentionConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()


@pytest.mark.parametrize("bad, field", [
    (dict(num_key_value_heads=3), "num_key_value_heads"),
    (dict(depth_stride=0), "depth_stride"),
    (dict(depth_stride=-2), "depth_stride"),
    (dict(depth_stride=2.5), "depth_stride"),
    (dict(depth_stride=True), "depth_stride"),
    (dict(depth_window=-1), "depth_window"),
    (dict(cross_layer="densformer"), "cross_layer"),
    (dict(depth_mix="max"), "depth_mix"),
    (dict(depth_mix_states="q"), "depth_mix_states"),
    (dict(hidden_size=30, num_attention_heads=4), "head_dim"),
    (dict(head_dim=7), "head_dim"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(rms_norm_eps=0.0), "rms_norm_eps"),
    (dict(num_hidden_layers="two"), "num_hidden_layers"),  # checked before layer_types is derived from it
    (dict(rms_norm_eps="abc"), "rms_norm_eps"),
    (dict(depth_impl="cuda"), "depth_impl must be one of 'auto', 'reference'"),
    # accepted, then ignored here while vLLM honoured it: the same folder gave other numbers there
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor 0.5 is not supported"),
])
def test_bad_values_name_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**bad)


def test_each_methods_implementation_names_are_its_ops_table():
    """The descriptions name the implementations without importing the ops (a config stays light to build)."""
    from depthattn.methods.descriptions.attnres import IMPL_NAMES as ATTNRES_NAMES
    from depthattn.methods.descriptions.depth_attention import DEPTH_IMPL_NAMES
    from depthattn.methods.descriptions.mhc import IMPL_NAMES as MHC_NAMES
    from depthattn.methods.descriptions.moda import MODA_IMPL_NAMES
    from depthattn.ops.attnres import ATTNRES_IMPLS
    from depthattn.ops.depth_mix import DEPTH_IMPLS
    from depthattn.ops.mhc import MHC_IMPLS

    assert DEPTH_IMPL_NAMES == DEPTH_IMPLS and tuple(MODA_IMPLS) == MODA_IMPL_NAMES
    assert tuple(ATTNRES_IMPLS) == ATTNRES_NAMES and tuple(MHC_IMPLS) == MHC_NAMES


def test_switch_method_field_switches_a_built_model_in_place():
    model = DepthAttentionForCausalLM(tiny_config(depth_stride=1, depth_impl="compiled")).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        before = model(ids).logits
    model.switch_method_field("depth_impl", "reference")
    assert model.config.depth_impl == "reference" and model.model.cross_layer.depth_mix is depth_mix_reference
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before)
    with pytest.raises(ValueError, match="depth_impl .*must be one of .*'reference'.*; got 'cuda'"):
        model.switch_method_field("depth_impl", "cuda")
    with pytest.raises(ValueError, match="depth_mix is not a switchable field of cross_layer='depth_attention' "
                                         r"\(switchable: depth_impl\)"):
        model.switch_method_field("depth_mix", "uniform")  # it changes what the model computes


def test_switch_method_field_refuses_a_combination_the_config_refuses_and_changes_nothing():
    model = DepthAttentionForCausalLM(tiny_config(depth_stride=1, depth_score_bias=True, depth_impl="compiled"))
    with pytest.raises(ValueError, match="not in the Triton kernels"):
        model.switch_method_field("depth_impl", "triton")
    assert model.config.depth_impl == "compiled" and model.model.cross_layer.depth_mix is depth_mix_compiled


def test_choice_errors_list_the_allowed_values():
    with pytest.raises(ValueError, match="'vanilla', 'depth_attention'"):
        tiny_config(cross_layer="nope")


@pytest.mark.parametrize("typo, field", [("depth_strid", "depth_stride"), ("depth_stirde", "depth_stride"),
                                         ("hiden_size", "hidden_size"), ("num_hidden_layer", "num_hidden_layers")])
def test_a_typo_of_a_field_is_an_error_naming_the_field(typo, field):
    with pytest.raises(ValueError, match=f"'{typo}' \\(did you mean '{field}'\\?\\)"):
        tiny_config(**{typo: 2})


def test_any_other_attribute_round_trips_as_in_transformers_configs(tmp_path):
    """Tools and training code set attributes of their own (transformers' test helper adds layer_norm_eps); a
    folder saved with them loads back through the Auto classes."""
    model = tiny_model()
    model.config.my_note, model.config.layer_norm_eps = "x", 1e-5
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert (reloaded.config.my_note, reloaded.config.layer_norm_eps) == ("x", 1e-5)
    ids = torch.randint(0, 97, (1, 6))
    assert torch.equal(reloaded(ids).logits, model(ids).logits)


def test_a_sliding_window_without_use_sliding_window_is_kept_and_ignored(tmp_path):
    """Qwen2, Qwen2.5 and Qwen3 configs ship use_sliding_window=False with sliding_window=4096."""
    config = tiny_config(use_sliding_window=False, sliding_window=4096)
    assert config.layer_types == ["full_attention"] * 4
    config.save_pretrained(tmp_path)
    assert DepthAttentionConfig.from_pretrained(tmp_path).sliding_window == 4096
    ids = torch.randint(0, 97, (1, 6))
    assert torch.equal(tiny_model(use_sliding_window=False, sliding_window=4096)(ids).logits, tiny_model()(ids).logits)


def test_the_vanilla_decoder_has_one_name_and_old_configs_still_load(tmp_path):
    import json

    tiny_config(cross_layer="vanilla").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["cross_layer"] == "vanilla"
    (tmp_path / "config.json").write_text(json.dumps({**saved, "cross_layer": "none"}))  # as earlier versions wrote
    with pytest.warns(FutureWarning, match='cross_layer="none" is the old name of "vanilla"'):
        assert DepthAttentionConfig.from_pretrained(tmp_path).cross_layer == "vanilla"


def _set_by_keyword(folder, **fields):
    return DepthAttentionForCausalLM.from_pretrained(folder, **fields)


def _set_by_assignment(folder, **fields):
    config = DepthAttentionConfig.from_pretrained(folder)
    for name, value in fields.items():
        setattr(config, name, value)
    return DepthAttentionForCausalLM(config)


def _set_by_update(folder, **fields):
    config = DepthAttentionConfig.from_pretrained(folder)
    config.update(fields)
    return DepthAttentionForCausalLM(config)


@pytest.mark.parametrize("set_fields", [_set_by_keyword, _set_by_assignment, _set_by_update])
def test_fields_set_after_the_constructor_are_checked_when_a_model_is_built(tmp_path, set_fields):
    tiny_model().save_pretrained(tmp_path)
    with pytest.warns(FutureWarning, match="old name"):
        assert set_fields(tmp_path, cross_layer="none").config.cross_layer == "vanilla"
    with pytest.raises(ValueError, match="cross_layer='depth_atention', a method not installed here .*"
                                         "\\(did you mean 'depth_attention'\\?\\)"):
        set_fields(tmp_path, cross_layer="depth_atention")
    with pytest.raises(ValueError, match="depth_stride must be an integer >= 1"):
        set_fields(tmp_path, depth_stride=0)
    with pytest.raises(ValueError, match="num_attention_heads \\(4\\) must be divisible by num_key_value_heads"):
        set_fields(tmp_path, num_key_value_heads=3)
    assert set_fields(tmp_path, depth_stride=1).config.depth_stride == 1


def test_switch_method_field_switches_moda_between_its_reference_and_merged_forms():
    model = DepthAttentionForCausalLM(tiny_config(cross_layer="moda")).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        before = model(ids).logits
        model.switch_method_field("moda_impl", "merged")
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=1e-5)
    assert model.config.moda_impl == "merged" and model.model.cross_layer.attend_with is MODA_IMPLS["merged"]
    with pytest.raises(ValueError, match="depth_impl is not a switchable field of cross_layer='moda'"):
        model.switch_method_field("depth_impl", "cpu")
