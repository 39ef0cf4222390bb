"""Random depth-mixing inputs laid out as modeling.py makes them, and a comparison of two implementations."""

from __future__ import annotations

import torch

from depthattn.layer_states import DepthState


def make_inputs(batch=2, seq_len=5, num_sources=2, num_heads=4, num_kv_heads=2, head_dim=16,
                dtype=torch.float32, shared_key=True, seed=0):
    """query (B, Hq, T, d) and n + 1 states (B, Hkv, T, d), as transposed views of (B, T, H, d) tensors like
    the model's projections; with `shared_key` the score key and the key are one tensor (as modeling.py)."""
    g = torch.Generator().manual_seed(seed)

    def heads(h):
        return torch.randn(batch, seq_len, h, head_dim, generator=g, dtype=torch.float64).to(dtype).transpose(1, 2)

    query = heads(num_heads).requires_grad_()
    states = []
    for _ in range(num_sources + 1):
        key = heads(num_kv_heads).requires_grad_()
        score_key = key if shared_key else heads(num_kv_heads).requires_grad_()
        states.append(DepthState(score_key, key, heads(num_kv_heads).requires_grad_()))
    return query, states[-1], states[:-1]


def leaves(query, state, sources):
    seen, out = set(), []
    for t in [query, *(x for s in [*sources, state] for x in s)]:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def run(fn, query, state, sources, scaling, rule, mix_states, seed=1, score_bias=None, need_weights=True):
    """Outputs of `fn` and the gradients of a loss that reads the mixed key, the mixed value and (if needed) the
    weights."""
    mixed, weights = fn(query, state, sources, scaling, rule, mix_states, score_bias,
                        **({} if need_weights else {"need_weights": False}))
    g = torch.Generator().manual_seed(seed)
    loss = sum((t.double() * torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.device)).sum()
               for t in (mixed.key, mixed.value, weights if need_weights else mixed.key * 0))
    inputs = leaves(query, state, sources) + ([] if score_bias is None else [score_bias])
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    grads = [torch.zeros_like(t) if gr is None else gr for t, gr in zip(inputs, grads, strict=True)]
    return mixed, weights, grads


def assert_same(fn, ref, query, state, sources, scaling, rule, mix_states, atol, rtol, score_bias=None,
                need_weights=True):
    """`fn` against `ref`: mixed states, weights and gradients; with `need_weights=False`, `fn` is called so and
    the weights it returns (None or the reference's) are left out of the loss."""
    a_mixed, a_w, a_grads = run(fn, query, state, sources, scaling, rule, mix_states, score_bias=score_bias,
                                need_weights=need_weights)
    b_mixed, b_w, b_grads = run(ref, query, state, sources, scaling, rule, mix_states, score_bias=score_bias,
                                need_weights=need_weights)
    compared = [("key", a_mixed.key, b_mixed.key), ("value", a_mixed.value, b_mixed.value)]
    if a_w is not None or need_weights:
        assert a_w.dtype == b_w.dtype and a_w.shape == b_w.shape
        compared.append(("weights", a_w, b_w))
    assert a_mixed.key.dtype == b_mixed.key.dtype and a_mixed.value.dtype == b_mixed.value.dtype
    assert a_mixed.score_key is state.score_key
    for name, x, y in compared:
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{name}: {m}")
    for i, (x, y) in enumerate(zip(a_grads, b_grads, strict=True)):
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m, i=i: f"gradient of input {i}: {m}")
