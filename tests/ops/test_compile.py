"""torch.compile: the compiled depth-mixing form and the whole model with fullgraph=True (no graph break)."""

import pytest
import torch

from depthattn import ops
from tests.helpers import tiny_model
from tests.ops.depth_cases import make_inputs, run


def test_whole_model_compiles_with_fullgraph_forward_and_backward():
    torch._dynamo.reset()
    overrides = dict(depth_stride=1, depth_window=1, depth_mix_states="kv", num_hidden_layers=3,
                     depth_impl="compiled")
    model = tiny_model(**overrides).train()
    ids = torch.randint(0, 97, (2, 12))
    eager = model(ids, labels=ids, output_depth_weights=True)
    eager.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # aot_eager: dynamo + AOT autograd exactly as inductor sees them (graph breaks raise with fullgraph),
    # without inductor's C++ code generation, which is slow on CPU
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out = compiled(ids, labels=ids, output_depth_weights=True)
    out.loss.backward()
    torch.testing.assert_close(out.logits, eager.logits)
    torch.testing.assert_close(out.depth_weights[1], eager.depth_weights[1])
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.slow
def test_inductor_fuses_depth_mix_forward_and_backward():
    torch._dynamo.reset()
    q, state, sources = make_inputs(seq_len=7, num_sources=2)
    fn = torch.compile(ops.depth_mix_compiled, fullgraph=True, dynamic=False)
    mixed, weights, grads = run(fn, q, state, sources, 0.25, "softmax", "v")
    r_mixed, r_weights, r_grads = run(ops.depth_mix_reference, q, state, sources, 0.25, "softmax", "v")
    torch.testing.assert_close(mixed.value, r_mixed.value)
    torch.testing.assert_close(weights, r_weights)
    for a, b in zip(grads, r_grads, strict=True):
        torch.testing.assert_close(a, b)
