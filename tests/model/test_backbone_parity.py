"""Llama, Mistral, Qwen2 and Qwen3 checkpoints convert without loss: in vanilla mode the converted model is
transformers' model (logits, cached decoding, greedy generation), and Depth-Attention on a converted model
decodes with a cache as it computes without one (docs/method.md#inference)."""

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM
from tests.helpers import prefill_then_decode, tiny_config, tiny_model

SMALL = dict(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             max_position_embeddings=64, attn_implementation="sdpa")
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16)
# every case with a window has it shorter than the 12-token prompts
CASES = {
    "llama-gqa": (LlamaForCausalLM, LlamaConfig, dict(num_key_value_heads=2)),
    "llama-biases-llama3-rope": (LlamaForCausalLM, LlamaConfig, dict(num_key_value_heads=4, attention_bias=True,
                                                                     mlp_bias=True, rope_parameters=LLAMA3_ROPE)),
    "mistral-sliding-mqa": (MistralForCausalLM, MistralConfig, dict(num_key_value_heads=1, sliding_window=4)),
    "qwen2-biases": (Qwen2ForCausalLM, Qwen2Config, dict(num_key_value_heads=2)),
    "qwen2-sliding-upper-layers": (Qwen2ForCausalLM, Qwen2Config, dict(num_key_value_heads=2, use_sliding_window=True,
                                                                       sliding_window=4, max_window_layers=1)),
    "qwen3-biases-sliding": (Qwen3ForCausalLM, Qwen3Config, dict(num_key_value_heads=2, head_dim=16,
                                                                 attention_bias=True, use_sliding_window=True,
                                                                 sliding_window=4, max_window_layers=1)),
}


def source_model(case, seed=0):
    model_class, config_class, settings = CASES[case]
    torch.manual_seed(seed)
    model = model_class(config_class(**SMALL, **settings)).eval()
    with torch.no_grad():  # biases and norms away from their initial 0 and 1, so that none can go unnoticed
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0, 0.5)
            elif "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("case", CASES)
def test_vanilla_matches_transformers(case):
    source = source_model(case)
    model = DepthAttentionForCausalLM.from_pretrained_decoder(source, cross_layer="vanilla")
    assert model.state_dict().keys() == source.state_dict().keys()
    ids = torch.randint(0, SMALL["vocab_size"], (2, 12))
    expected = source(ids).logits
    torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=1e-5)
    cached, _ = prefill_then_decode(model, ids, 5)
    torch.testing.assert_close(cached, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["mistral-sliding-mqa", "qwen2-sliding-upper-layers", "qwen3-biases-sliding"])
def test_the_sliding_window_takes_effect(case):
    """Without the window the same weights give other logits (by 10x the parity tolerance at least), so the
    parity above covers the window."""
    source = source_model(case)
    model = DepthAttentionForCausalLM.from_pretrained_decoder(source, cross_layer="vanilla")
    full = DepthAttentionForCausalLM.from_pretrained_decoder(
        source, cross_layer="vanilla", use_sliding_window=False, sliding_window=None)
    ids = torch.randint(0, SMALL["vocab_size"], (1, 12))
    assert (model(ids).logits - full(ids).logits)[:, 6:].abs().max() > 1e-4


@pytest.mark.parametrize("case", ["llama-biases-llama3-rope", "mistral-sliding-mqa", "qwen2-sliding-upper-layers"])
def test_greedy_generate_matches_transformers(case):
    source = source_model(case)
    model = DepthAttentionForCausalLM.from_pretrained_decoder(source, cross_layer="vanilla")
    prompt = torch.randint(1, SMALL["vocab_size"], (2, 6))
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(model.generate(prompt, **settings), source.generate(prompt, **settings), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["llama-gqa", "mistral-sliding-mqa", "qwen2-biases"])
def test_folder_round_trip(tmp_path, case):
    source = source_model(case)
    source.save_pretrained(tmp_path / "source")
    model = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "source", cross_layer="vanilla")
    ids = torch.randint(0, SMALL["vocab_size"], (2, 12))
    torch.testing.assert_close(model(ids).logits, source(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["llama-biases-llama3-rope", "mistral-sliding-mqa"])
def test_depth_attention_on_a_converted_model_decodes_as_its_full_forward(case):
    model = DepthAttentionForCausalLM.from_pretrained_decoder(source_model(case), depth_stride=2, depth_window=1)
    assert model.config.cross_layer == "depth_attention"
    ids = torch.randint(0, SMALL["vocab_size"], (2, 12))
    full = model(ids, use_cache=False).logits
    assert (full - source_model(case)(ids).logits).abs().max() > 1e-3  # the mixing is on
    cached, _ = prefill_then_decode(model, ids, 5)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)


def test_a_looped_model_with_a_sliding_window_decodes_as_its_full_forward():
    model = tiny_model(num_loops=2, use_sliding_window=True, sliding_window=3, max_window_layers=2, depth_stride=2)
    assert model.config.layer_types == ["full_attention"] * 2 + ["sliding_attention"] * 2
    ids = torch.randint(0, model.config.vocab_size, (2, 10))
    cached, cache = prefill_then_decode(model, ids, 4)
    torch.testing.assert_close(cached, model(ids, use_cache=False).logits, rtol=0, atol=1e-5)
    # slot u has layer u % 4's kind: a sliding slot keeps the window's sliding_window - 1 past tokens
    assert [layer.keys.shape[-2] for layer in cache.layers] == [10, 10, 2, 2] * 2


def test_unsupported_architectures_are_named(tmp_path):
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match="model_type 'gpt2'; supported: LlamaForCausalLM, MistralForCausalLM, "
                                         "Qwen2ForCausalLM, Qwen3ForCausalLM"):
        DepthAttentionForCausalLM.from_pretrained_decoder(gpt2)
    gpt2.save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="cannot convert model_type 'gpt2'"):
        DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="supported: Qwen3ForCausalLM$"):
        DepthAttentionForCausalLM.from_qwen3(source_model("llama-gqa"))


@pytest.mark.parametrize("bad, message", [
    (dict(use_sliding_window=True), "needs sliding_window"),
    (dict(use_sliding_window=True, sliding_window=0), "needs sliding_window"),
    (dict(max_window_layers=-1), "max_window_layers"),
    (dict(use_qk_norm="yes"), "use_qk_norm"),
    (dict(depth_self_bias_init=30.0), "depth_score_bias=True"),
])
def test_bad_backbone_switches_name_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**bad)


def test_backbone_switches_round_trip(tmp_path):
    config = tiny_config(qkv_bias=True, mlp_bias=True, use_qk_norm=False, use_sliding_window=True, sliding_window=8,
                         max_window_layers=3, depth_score_bias=True, depth_self_bias_init=30.0)
    config.save_pretrained(tmp_path)
    loaded = DepthAttentionConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict() and loaded.layer_types[2:] == ["full_attention", "sliding_attention"]
