"""The baselines' library kernels (ops/attnres/fused.py: fla-core, Liger-Kernel; ops/mhc/liger.py) against their
references. Liger's run in Triton's interpreter on a CPU (tests/methods/test_liger_parity.py, with the whole
models); fla's fused AttnRes refuses CPU tensors even there, so it is compared here on a GPU only."""

import os

import pytest
import torch

from depthattn.ops.attnres import ATTNRES_IMPLS, attnres_reference
from tests.helpers import tiny_model

D = 64


def sources(device, dtype=torch.float32, n=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 5, D, generator=generator).to(device, dtype).requires_grad_() for _ in range(n)]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="in the interpreter the kernels run on a CPU")
@pytest.mark.parametrize("settings", [dict(cross_layer="attnres", attnres_impl="fla", attnres_recency_bias=False),
                                      dict(cross_layer="attnres", attnres_impl="liger", attnres_recency_bias=False),
                                      dict(cross_layer="mhc", mhc_impl="liger")],
                         ids=["attnres-fla", "attnres-liger", "mhc-liger"])
def test_library_kernels_refuse_a_cpu_naming_the_reference(settings):
    """On a CPU a model whose method selects a library's kernels refuses to run, naming the value that runs there."""
    field = next(name for name in settings if name.endswith("_impl"))
    model = tiny_model(**settings)
    with pytest.raises(RuntimeError, match=f"use {field} 'reference'"):
        model(torch.randint(0, 97, (1, 4)))
    model.switch_method_field(field, "reference")
    assert torch.isfinite(model(torch.randint(0, 97, (1, 4))).logits).all()


def test_attnres_reference_weights_sum_to_one_and_the_bias_favours_the_last():
    query, gain, srcs = torch.randn(D) * D ** -0.5, torch.rand(D) + 0.5, [s.detach() for s in sources("cpu")]
    plain = attnres_reference(query, srcs, gain, 1e-5)
    biased = attnres_reference(query, srcs, gain, 1e-5, recency_bias=torch.tensor(30.0))
    torch.testing.assert_close(biased, srcs[-1])  # e^30 against the rest: the last source alone
    assert not torch.allclose(plain, srcs[-1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fla's fused AttnRes needs CUDA tensors")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fla_attnres_matches_the_reference_on_a_gpu(dtype):
    pytest.importorskip("fla")
    pytest.importorskip("triton")
    srcs = sources("cuda", dtype)
    query = (torch.randn(D, device="cuda") * D ** -0.5).requires_grad_()
    gain = (torch.rand(D, device="cuda") + 0.5).requires_grad_()
    leaves = [*srcs, query, gain]
    outs = [ATTNRES_IMPLS[impl](query, srcs, gain, 1e-5) for impl in ("reference", "fla")]
    probe = torch.randn_like(outs[0])
    grads = [torch.autograd.grad((out.float() * probe).sum(), leaves) for out in outs]
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs[1], outs[0], **tol)
    for mine, theirs in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(theirs, mine, **tol)
