"""The baselines' library kernels (ops/attnres/fused.py: fla-core, Liger-Kernel; ops/mhc/liger.py) against their
references. Liger's run in Triton's interpreter on a CPU (tests/methods/test_liger_parity.py, with the whole
models); fla's fused AttnRes refuses CPU tensors even there, so it is compared here on a GPU only."""

import os

import pytest
import torch

from depthattn.ops.attnres import ATTNRES_IMPLS, attnres_reference
from tests.helpers import perturb_method, tiny_model

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


# each library's kernels in a whole model (several blocks, every sublayer's aggregator or connections), against the
# reference: (config settings, the kernel field, its library's value)
MODEL_KERNELS = [
    (dict(cross_layer="attnres", attnres_sources="blocks", attnres_recency_bias=False, attnres_block_size=3),
     "attnres_impl", "fla"),
    (dict(cross_layer="attnres", attnres_sources="blocks", attnres_recency_bias=False, attnres_block_size=3),
     "attnres_impl", "liger"),
    (dict(cross_layer="mhc", mhc_streams=4), "mhc_impl", "liger"),  # Liger: n a power of two
]


def deviations_from_the_reference(settings: dict, field: str, library: str, device: str, dtype: torch.dtype
                                  ) -> dict[str, float]:
    """The largest deviation of the library's logits and of each parameter's gradient from the reference's, over
    that tensor's largest entry (trained-looking method weights, a fixed probe of the logits)."""
    model = perturb_method(tiny_model(**settings)).to(device, dtype).train()
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0)).to(device)
    probe = torch.randn(2, 16, 97, generator=torch.Generator().manual_seed(1)).to(device)

    def run(value):
        model.switch_method_field(field, value)
        model.zero_grad()
        logits = model(ids).logits
        (logits.float() * probe).sum().backward()
        grads = {name: p.grad.float().clone() for name, p in model.named_parameters() if p.grad is not None}
        return {"logits": logits.detach().float(), **grads}

    reference, theirs = run("reference"), run(library)
    assert reference.keys() == theirs.keys()
    return {name: float((theirs[name] - mine).abs().max() / mine.abs().max().clamp_min(1e-12))
            for name, mine in reference.items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the libraries' kernels run on a CUDA GPU (Liger's also in "
                    "Triton's interpreter: tests/methods/test_liger_parity.py)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("settings, field, library", MODEL_KERNELS, ids=["attnres-fla", "attnres-liger", "mhc-liger"])
def test_library_kernels_match_the_reference_in_a_model_on_a_gpu(settings, field, library, dtype):
    pytest.importorskip({"fla": "fla", "liger": "liger_kernel"}[library])
    deviations = deviations_from_the_reference(settings, field, library, "cuda", dtype)
    # float32: Liger's coefficient matmul runs in TF32 on a GPU; bfloat16: its 8-bit mantissa, through 4 layers
    assert max(deviations.values()) <= (2e-3 if dtype == torch.float32 else 6e-2), deviations
