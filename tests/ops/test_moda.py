"""MoDA's combined softmax: the reference against a per-query loop, and the SDPA form against the reference in
outputs and gradients."""

import math

import pytest
import torch

from depthattn.ops.moda import moda_attention_merged, moda_attention_reference


def inputs(B=2, Hq=4, Hkv=2, T=5, S=7, n=3, d=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(B, Hq, T, d), (B, Hkv, S, d), (B, Hkv, S, d), (B, Hkv, T, n, d), (B, Hkv, T, n, d)]
    return [torch.randn(shape, generator=generator, dtype=torch.float64, requires_grad=True) for shape in shapes]


def padding_mask(B, T, S):
    """Causal, the first key of batch row 1 masked (left padding): bool (B, 1, T, S), True = attend."""
    causal = torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]
    mask = causal.expand(B, 1, T, S).clone()
    mask[1, :, :, 0] = False
    return mask


@pytest.mark.parametrize("shape", [dict(), dict(T=1, S=9)])
def test_the_reference_is_one_softmax_over_sequence_and_depth_keys(shape):
    """Without a mask as transformers' SDPA reads none (is_causal): several queries see the keys from the first
    to their own index (a static cache's prefill: the slots past the prompt are empty), one query every key."""
    query, key, value, depth_key, depth_value = inputs(**shape)
    B, Hq, T, d = query.shape
    S, groups, scale = key.shape[2], Hq // key.shape[1], d**-0.5
    out, _ = moda_attention_reference(query, key, value, depth_key, depth_value, None, scale)
    for b, h, t in [(0, 0, 0), (1, 3, T - 1), (0, 2, T // 2)]:
        kv, position = h // groups, (t if T > 1 else S - 1)
        keys = [key[b, kv, s] for s in range(position + 1)] + list(depth_key[b, kv, t])
        values = [value[b, kv, s] for s in range(position + 1)] + list(depth_value[b, kv, t])
        weights = torch.softmax(torch.stack([query[b, h, t] @ k * scale for k in keys]), 0)
        expected = sum(w * v for w, v in zip(weights, values, strict=True))
        torch.testing.assert_close(out[b, t, h], expected)


@pytest.mark.parametrize("mask_kind", ["causal", "bool", "additive"])
@pytest.mark.parametrize("shape", [dict(), dict(T=1, S=9), dict(Hkv=4, n=1), dict(T=6, S=6, n=6)])
def test_the_sdpa_form_equals_the_reference_with_gradients(mask_kind, shape):
    tensors = inputs(**shape)
    B, _, T, d = tensors[0].shape
    S = tensors[1].shape[2]
    mask = None if mask_kind == "causal" else padding_mask(B, T, S)
    if mask_kind == "additive":
        mask = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, -math.inf)
    outputs, grads = [], []
    for attend in (moda_attention_reference, moda_attention_merged):
        out, _ = attend(*tensors, mask, d**-0.5)
        outputs.append(out)
        grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), tensors))
    torch.testing.assert_close(outputs[1], outputs[0])
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want)
