import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

import depthattn
from depthattn import DepthAttentionForCausalLM, DepthAttentionModel, DepthState
from depthattn.ops import depth_mix_reference
from tests.helpers import tiny_config, tiny_model


def test_save_reload_through_auto_classes(tmp_path):
    model = tiny_model(depth_stride=1, depth_window=1, depth_mix_states="kv")
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert set(load_file(tmp_path / "model.safetensors")) == set(model.state_dict())
    assert AutoConfig.from_pretrained(tmp_path).depth_mix_states == "kv"
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(reloaded, DepthAttentionForCausalLM)
    ids = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, DepthAttentionModel)
    torch.testing.assert_close(base(ids).last_hidden_state, model.model(ids).last_hidden_state, rtol=0, atol=0)


def test_tied_embeddings_round_trip(tmp_path):
    model = tiny_model(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    ids = torch.randint(0, 97, (1, 5))
    torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_depth_attention_adds_no_parameters():
    assert depthattn.count_parameters(tiny_model())["extra_over_vanilla"] == 0  # its default method


def test_only_self_sources_give_exactly_the_vanilla_output():
    ids = torch.randint(0, 97, (2, 8))
    one_layer = tiny_model(num_hidden_layers=1)
    vanilla = tiny_model(num_hidden_layers=1, cross_layer="vanilla")
    assert one_layer.model.cross_layer.sources == [[]]
    assert torch.equal(one_layer(ids).logits, vanilla(ids).logits)


@pytest.mark.parametrize("stride", [4, 5, 100])
def test_stride_at_least_depth_reads_layer_zero_only(stride):
    model = tiny_model(depth_stride=stride)
    assert model.model.cross_layer.sources == [[], [0], [0], [0]]


def test_depth_weights_are_returned_and_normalised():
    model = tiny_model(depth_stride=1)
    out = model(torch.randint(0, 97, (2, 6)), output_depth_weights=True)
    assert len(out.depth_weights) == 3  # layers 1-3; layer 0 has no sources
    for layer, weights in enumerate(out.depth_weights, start=1):
        assert weights.shape == (2, 2, 6, layer + 1) and weights.dtype == torch.float32
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))
    uniform = tiny_model(depth_stride=1, depth_mix="uniform")(torch.zeros(1, 3, dtype=torch.long),
                                                             output_depth_weights=True)
    assert torch.all(uniform.depth_weights[2] == 0.25)  # layer 3


def test_depth_weights_are_computed_only_when_recorded():
    model = tiny_model(depth_stride=1)
    ids = torch.randint(0, 97, (2, 6))  # few rows: mixing without weights takes another form
    recorded, plain = model(ids, output_depth_weights=True), model(ids)
    assert plain.depth_weights is None and len(recorded.depth_weights) == 3
    torch.testing.assert_close(plain.logits, recorded.logits, rtol=0, atol=1e-5)


def test_output_attentions_takes_the_eager_path_with_the_same_output():
    model = tiny_model(depth_stride=1)
    ids = torch.randint(0, 97, (2, 7))
    out = model(ids, output_attentions=True, output_hidden_states=True)
    assert len(out.attentions) == 4 and out.attentions[0].shape == (2, 4, 7, 7)
    assert len(out.hidden_states) == 5
    torch.testing.assert_close(out.logits, model(ids).logits, rtol=0, atol=1e-5)
    assert torch.all(out.attentions[2].triu(1) == 0)  # causal


@pytest.mark.parametrize("bad", [97, 1000, -1])
def test_token_ids_out_of_range_are_a_clear_error(bad):
    model = tiny_model()
    ids = torch.tensor([[1, 2, bad]])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 97\)"):
        model(ids)


def test_exactly_one_input():
    model = tiny_model()
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(None)


def test_gradcheck_through_depth_mixing():
    b, hq, hkv, t, d = 1, 4, 2, 3, 4

    def run(query, k0, v0, k1, v1, k2, v2):
        sources = [DepthState(k0, k0, v0), DepthState(k1, k1, v1)]
        mixed, weights = depth_mix_reference(query, DepthState(k2, k2, v2), sources, d**-0.5, mix_states="kv")
        return mixed.key, mixed.value, weights

    inputs = [torch.randn(b, hq, t, d, dtype=torch.float64, requires_grad=True)]
    inputs += [torch.randn(b, hkv, t, d, dtype=torch.float64, requires_grad=True) for _ in range(6)]
    assert torch.autograd.gradcheck(run, inputs)


def test_gradcheck_whole_model_float64():
    model = tiny_model(torch.float64, hidden_size=8, intermediate_size=8, num_attention_heads=2,
                       num_key_value_heads=1, num_hidden_layers=3, depth_stride=1)
    embeds = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: model(inputs_embeds=x).logits, (embeds,))


def test_every_parameter_gets_a_gradient_and_earlier_values_learn_through_the_mix():
    ids = torch.randint(0, 97, (2, 6))
    grads = {}
    for cross_layer in ("depth_attention", "vanilla"):
        model = tiny_model(cross_layer=cross_layer, depth_stride=1).train()
        model(ids, labels=ids).loss.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
        grads[cross_layer] = model.model.layers[0].self_attn.v_proj.weight.grad
    assert not torch.allclose(grads["depth_attention"], grads["vanilla"])


def test_public_api_registered():
    assert AutoConfig.for_model("depth_attention").__class__ is depthattn.DepthAttentionConfig


def test_the_base_model_takes_transformers_arguments_by_name_and_returns_tuples():
    import inspect

    from depthattn import DepthAttentionModel

    model = DepthAttentionModel(tiny_config()).eval()
    parameters = inspect.signature(model.forward).parameters
    assert list(parameters)[:5] == ["input_ids", "attention_mask", "position_ids", "cache", "inputs_embeds"]
    ids = torch.randint(0, 97, (2, 7))
    out = model(ids, output_hidden_states=True)
    as_tuple = model(ids, output_hidden_states=True, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.last_hidden_state)
    assert len(as_tuple[-1]) == len(out.hidden_states) == 5
    embedded = model(inputs_embeds=model.embed_tokens(ids)).last_hidden_state
    torch.testing.assert_close(embedded, out.last_hidden_state, rtol=0, atol=0)


def test_reading_a_step_that_has_not_run_names_the_step():
    from depthattn.layer_states import DepthStates

    states = DepthStates(depth=3)
    state = DepthState(*(torch.zeros(1, 1, 2, 4) for _ in range(3)))
    states[0] = state
    assert states[0] is state
    with pytest.raises(LookupError, match="step 1 has written no state yet in this pass"):
        states[1]
