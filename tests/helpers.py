"""Tiny models and configs shared by the tests."""

import torch

import depthattn


def tiny_config(**overrides) -> depthattn.DepthAttentionConfig:
    settings = dict(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0,
    )
    settings.update(overrides)
    return depthattn.DepthAttentionConfig(**settings)


def tiny_model(dtype=torch.float32, seed=0, **overrides) -> depthattn.DepthAttentionForCausalLM:
    torch.manual_seed(seed)
    model = depthattn.DepthAttentionForCausalLM(tiny_config(**overrides)).to(dtype).eval()
    with torch.no_grad():  # norms away from 1 so that a q/k-norm bug cannot hide
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model

