"""Vanilla mode is transformers' Qwen3, weight for weight; Qwen3 checkpoints convert without loss."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

from depthattn import DepthAttentionForCausalLM


def qwen3(num_key_value_heads=2, tie_word_embeddings=False, seed=0):
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=num_key_value_heads, head_dim=16, max_position_embeddings=64,
        tie_word_embeddings=tie_word_embeddings, attn_implementation="sdpa",
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # perturbed norms, so that q/k-norm placement and weights matter
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("num_key_value_heads", [4, 2, 1])
@pytest.mark.parametrize("tie", [False, True])
def test_vanilla_matches_qwen3(num_key_value_heads, tie):
    reference = qwen3(num_key_value_heads, tie)
    model = DepthAttentionForCausalLM.from_qwen3(reference, cross_layer="vanilla")
    assert model.config.tie_word_embeddings == tie
    ids = torch.randint(0, 101, (2, 12))
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)


def test_state_dict_keys_are_qwen3s():
    reference = qwen3()
    model = DepthAttentionForCausalLM.from_qwen3(reference)
    assert model.config.cross_layer == "depth_attention"
    assert model.state_dict().keys() == reference.state_dict().keys()
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_depth_attention_changes_the_output_of_a_converted_model():
    reference = qwen3()
    model = DepthAttentionForCausalLM.from_qwen3(reference, depth_stride=1)
    ids = torch.randint(0, 101, (1, 8))
    assert (model(ids).logits - reference(ids).logits).abs().max() > 1e-3


def test_from_qwen3_directory_round_trip(tmp_path):
    reference = qwen3()
    reference.save_pretrained(tmp_path / "qwen3")
    model = DepthAttentionForCausalLM.from_qwen3(tmp_path / "qwen3", cross_layer="vanilla")
    ids = torch.randint(0, 101, (2, 10))
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)

    model.save_pretrained(tmp_path / "converted")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "converted")
    assert isinstance(again, DepthAttentionForCausalLM)
    torch.testing.assert_close(again(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)


def test_from_qwen3_rejects_other_models(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        DepthAttentionForCausalLM.from_qwen3(tmp_path / "missing")
    depth = DepthAttentionForCausalLM.from_qwen3(qwen3())
    with pytest.raises(ValueError, match="model_type .depth_attention.; supported: Qwen3ForCausalLM"):
        DepthAttentionForCausalLM.from_qwen3(depth)


@pytest.mark.parametrize("method", ["denseformer", "value_residual", "mhc"])
def test_from_qwen3_keeps_every_tensor_for_baselines_with_parameters(method):
    reference = qwen3()
    model = DepthAttentionForCausalLM.from_qwen3(reference, cross_layer=method)
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert any(k.startswith("model.cross_layer.") for k in model.state_dict())
