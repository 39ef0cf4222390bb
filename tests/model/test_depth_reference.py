"""The whole model against a plain loop reference written from docs/method.md#the-operation: per layer, per head,
per position."""

import math

import pytest
import torch

from depthattn import depth_sources
from depthattn.methods.depth_attention import resolved_depth_stride
from tests.helpers import tiny_model


def rms_norm(x, weight, eps):
    return weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def rope(x, position, theta):
    """x: (d,) at one position; rotate-half convention. Angles in float32, as Qwen3 computes them."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = torch.cat([position * inv_freq, position * inv_freq])
    rotated = torch.cat([-x[d // 2:], x[: d // 2]])
    return x * torch.cos(angle).double() + rotated * torch.sin(angle).double()


def reference_logits(model, ids):
    """ids: (T,) one sequence. Returns (T, vocab) logits, computed one scalar formula at a time."""
    cfg = model.config
    sd = {k: v.double() for k, v in model.state_dict().items()}
    n_layers, n_heads, n_kv, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    group = n_heads // n_kv
    seq = len(ids)
    eps, theta = cfg.rms_norm_eps, cfg.rope_parameters["rope_theta"]
    depth = cfg.cross_layer == "depth_attention"
    mixes_k, mixes_v = "k" in cfg.depth_mix_states, "v" in cfg.depth_mix_states

    h = sd["model.embed_tokens.weight"][ids]  # (T, D)
    raw_k, state_k, state_v = {}, {}, {}  # per layer: (T, Hkv, d)
    for layer in range(n_layers):
        p = f"model.layers.{layer}."
        x = rms_norm(h, sd[p + "input_layernorm.weight"], eps)
        q = (x @ sd[p + "self_attn.q_proj.weight"].T).view(seq, n_heads, d)
        k = (x @ sd[p + "self_attn.k_proj.weight"].T).view(seq, n_kv, d)
        v = (x @ sd[p + "self_attn.v_proj.weight"].T).view(seq, n_kv, d)
        q = rms_norm(q, sd[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, sd[p + "self_attn.k_norm.weight"], eps)
        q = torch.stack([torch.stack([rope(q[t, i], t, theta) for i in range(n_heads)]) for t in range(seq)])
        k = torch.stack([torch.stack([rope(k[t, g], t, theta) for g in range(n_kv)]) for t in range(seq)])

        sources = depth_sources(layer, resolved_depth_stride(cfg), cfg.depth_window) if depth else []
        k_mixed, v_mixed = k.clone(), v.clone()
        if sources:
            for t in range(seq):
                for g in range(n_kv):
                    qbar = q[t, g * group:(g + 1) * group].mean(0)
                    keys = [raw_k[j][t, g] for j in sources] + [k[t, g]]
                    if cfg.depth_mix == "softmax":
                        a = torch.softmax(torch.stack([qbar @ kj / math.sqrt(d) for kj in keys]), 0)
                    else:
                        a = torch.full((len(keys),), 1.0 / len(keys), dtype=torch.float64)
                    if mixes_v:
                        v_mixed[t, g] = sum(a[i] * state_v[j][t, g] for i, j in enumerate(sources)) + a[-1] * v[t, g]
                    if mixes_k:
                        k_mixed[t, g] = sum(a[i] * state_k[j][t, g] for i, j in enumerate(sources)) + a[-1] * k[t, g]
        raw_k[layer], state_k[layer], state_v[layer] = k, k_mixed, v_mixed

        out = torch.zeros(seq, n_heads, d, dtype=torch.float64)
        for t in range(seq):
            for i in range(n_heads):
                g = i // group
                scores = torch.stack([q[t, i] @ k_mixed[s, g] / math.sqrt(d) for s in range(t + 1)])
                out[t, i] = torch.softmax(scores, 0) @ v_mixed[: t + 1, g]
        h = h + out.reshape(seq, -1) @ sd[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, sd[p + "post_attention_layernorm.weight"], eps)
        gate, up = x @ sd[p + "mlp.gate_proj.weight"].T, x @ sd[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    return rms_norm(h, sd["model.norm.weight"], eps) @ sd["lm_head.weight"].T


CASES = [
    dict(depth_stride=None),
    dict(depth_stride=1),
    dict(depth_stride=2, depth_window=1),
    dict(depth_stride=3),
    dict(depth_stride=5, depth_window=2, num_hidden_layers=5),
    dict(depth_stride=2, num_key_value_heads=4),
    dict(depth_stride=2, num_key_value_heads=1),
    dict(depth_stride=2, depth_mix="uniform"),
    dict(depth_stride=1, depth_mix_states="kv"),
    dict(depth_stride=2, depth_window=1, depth_mix_states="k"),
    dict(depth_stride=1, depth_mix="uniform", depth_mix_states="kv", num_key_value_heads=1),
    dict(cross_layer="vanilla"),
]


@pytest.mark.parametrize("settings", CASES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_model_matches_loop_reference(settings, attn_implementation):
    model = tiny_model(torch.float64, **settings)
    model.config._attn_implementation = attn_implementation
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    logits = model(ids).logits
    for b in range(ids.shape[0]):
        torch.testing.assert_close(logits[b], reference_logits(model, ids[b]), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("layer, stride, window, expected", [
    (0, 12, 0, []),
    (1, 12, 0, [0]),
    (12, 12, 0, [0]),
    (13, 12, 0, [0, 12]),
    (23, 12, 0, [0, 12]),
    (25, 24, 0, [0, 24]),
    (5, 1, 0, [0, 1, 2, 3, 4]),
    (5, 100, 0, [0]),
    (7, 4, 2, [0, 4, 5, 6]),
    (3, 10, 5, [0, 1, 2]),
])
def test_depth_sources(layer, stride, window, expected):
    assert depth_sources(layer, stride, window) == expected


def test_paper_source_count():
    """docs/method.md#inference: for L=48, s=24 the mixing layers (l >= 1) read sum |S(l)| + 1 = 117 states."""
    assert sum(len(depth_sources(layer, 24)) + 1 for layer in range(1, 48)) == 117
