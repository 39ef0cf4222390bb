"""The whole model on a CUDA GPU (skipped elsewhere): the Triton and the compiled depth mixing against the
reference mixing in logits and every parameter's gradient, cached decoding against the full forward, and the
model compiled with inductor (real Triton code generation) against eager."""

import pytest
import torch

from depthattn import ops
from tests.helpers import prefill_then_decode, tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# head dim 32; two blocks of 64 positions in the Triton kernels (100 tokens), the second one ragged
SIZE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=4)
VARIANTS = [
    dict(),
    dict(depth_stride=1, depth_mix_states="kv"),
    dict(depth_stride=1, depth_mix="uniform", depth_mix_states="k"),
]


def ids_of(settings):
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "default"


def loss_and_grads(impl: str, ids: torch.Tensor, dtype: torch.dtype, settings: dict):
    model = tiny_model(dtype=dtype, depth_impl=impl, **SIZE, **settings).cuda().train()  # same seed: same weights
    out = model(ids, labels=ids)
    out.loss.backward()
    return out.logits.float(), {n: p.grad.float() for n, p in model.named_parameters()}


@pytest.mark.parametrize("impl", ["triton", "compiled"])
@pytest.mark.parametrize("settings", VARIANTS, ids=ids_of)
def test_fast_depth_mix_matches_reference_in_logits_and_gradients(impl, settings):
    if impl == "triton" and not ops.TRITON_AVAILABLE:
        pytest.skip("triton is not installed")
    ids = torch.randint(0, 97, (2, 100), device="cuda")
    logits, grads = loss_and_grads(impl, ids, torch.float32, settings)
    ref_logits, ref_grads = loss_and_grads("reference", ids, torch.float32, settings)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-3, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_triton_bfloat16_model_close_to_reference():
    if not ops.TRITON_AVAILABLE:
        pytest.skip("triton is not installed")
    ids = torch.randint(0, 97, (2, 100), device="cuda")
    logits, _ = loss_and_grads("triton", ids, torch.bfloat16, {})
    ref_logits, _ = loss_and_grads("reference", ids, torch.bfloat16, {})
    assert (logits - ref_logits).norm() / ref_logits.norm() < 2e-2


@pytest.mark.parametrize("settings", VARIANTS, ids=ids_of)
def test_cached_decoding_matches_full_forward(settings):
    model = tiny_model(**SIZE, **settings).cuda()  # depth_impl auto: Triton where installed
    ids = torch.randint(0, 97, (2, 24), device="cuda")
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cached, _ = prefill_then_decode(model, ids, 9)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)


def test_inductor_compiled_model_matches_eager():
    torch._dynamo.reset()
    model = tiny_model(**SIZE, depth_stride=1, depth_mix_states="kv").cuda().train()
    ids = torch.randint(0, 97, (2, 100), device="cuda")
    eager = model(ids, labels=ids)
    eager.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    out = torch.compile(model, fullgraph=True)(ids, labels=ids)
    out.loss.backward()
    torch.testing.assert_close(out.logits, eager.logits, rtol=1e-4, atol=1e-4)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], rtol=1e-3, atol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
