"""Our Block AttnRes and mHC against Liger-Kernel 0.8.5's Triton ops, weight for weight: `LigerAttnResFunction`
(liger_kernel/ops/attn_res.py) and `LigerMHCCoeffsFunction`, `LigerMHCPreFunction`, `LigerMHCPostResFunction`
(liger_kernel/ops/mhc.py); outputs and gradients, in float32.

Liger's ops are Triton kernels. Without a GPU they run in Triton's interpreter, which TRITON_INTERPRET=1 turns on
before triton is imported and which needs numpy < 2.4, so `test_liger_cases_in_a_fresh_interpreter_process` runs
the cases in a fresh process (`pip install 'depthattn[liger]' 'numpy<2.4'`); elsewhere they skip. The interpreter
computes Liger's float32 coefficient matmul in float32; on a GPU Triton's default dot precision makes it TF32.

AttnRes. Liger's op is one aggregator, `sum_i softmax_i(<w, rmsnorm_g(v_i)>) v_i` over the stacked sources it is
given, fla's reference aggregator in a kernel; the test drives it as tests/methods/test_attnres_parity.py drives
fla's, with the paper's block bookkeeping (Kimi Team, arXiv 2603.15031), and accounts for the same two differences,
which `test_each_attnres_difference_is_real` undoes one at a time:
- sources: ours reads the prefix sums of the paper's sources (the running stream and its snapshots at the block
  ends). Accounted for by handing Liger the prefix sums.
- recency bias: ours adds a learned bias (3.0 at init) to the running stream's logit; Liger has none. Our bias = 0.

mHC (Xie et al., arXiv 2512.24880). Liger's three functions are one sublayer's connections: the coefficients (pre,
post and the Sinkhorn mix, from the RMS-normed flattened streams), the pre-mix `sum_i pre_i x_i`, and the update
`x_o <- sum_i res_oi x_i + post_o f`. Same as ours: the projection's rows (n pre, n post, the n x n mix row-major),
three gating scales, `sigmoid` pre (Liger's `pre_eps` 0), `2 sigmoid` post (`post_mult` 2), `res x` (not the
transpose) and a Sinkhorn that ends on a column normalisation. By layout only: Liger's phi is (nD, 2n + n^2),
`x @ phi`, ours (2n + n^2, nD), `z @ phi^T`; its coefficient function takes float32 streams only with
`allow_fp32=True` (LigerMHC keeps phi in float16 by default), and returns float32 coefficients, as ours does;
`rms_eps` is passed ours (config 1e-5; Liger's default 1e-6). It has no stream expansion or head (LigerMHC wraps one
layer), so a pass compares the streams after the last sublayer, before our final merge.
- sinkhorn_eps, where it differs: Liger adds it (1e-6 by default) to the row-softmaxed matrix and to every Sinkhorn
  denominator; we add none. Accounted for by `sinkhorn_eps = 0`; shown real on the mix, relative to each entry
  (`test_liger_sinkhorn_eps_is_real`).
- iterations: its `tmax` counts the first row softmax and column normalisation as one iteration, so
  `tmax = mhc_sinkhorn_iters` (`test_liger_tmax_counts_as_our_iterations`: one more moves the streams).

Our models select these kernels through switchable fields (`mhc_impl = "liger"`, `attnres_impl = "liger"` where
AttnRes has no recency bias: ops/mhc/liger.py, ops/attnres/fused.py, set to the accounted settings above); a
whole model switched to them gives the reference's logits and gradients (`test_a_model_switched_to_liger`).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest
import torch

from depthattn.methods import attnres
from tests.helpers import perturb_method, tiny_model
from tests.methods.parity import D, attnres_away_from_init, mhc_away_from_init, paper_block_attnres, run_sublayers

ROOT = Path(__file__).resolve().parents[2]
FIX = "pip install 'depthattn[liger]' 'numpy<2.4'"
TOL = 2e-6    # float32, of each tensor's largest entry
TOKENS = (2, 3)  # batch, sequence: Triton's interpreter runs one kernel program per token, in Python
# Liger's kernels divide the padded rows of a block too (0 / 0, masked out of what they store)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
LIGER_SINKHORN_EPS = 1e-6  # liger_mhc_coeffs' and LigerMHC's default in 0.8.5 (pre_eps 0.0, post_mult 2.0)


def unavailable() -> str | None:
    """Why Liger's kernels cannot run in Triton's interpreter here, or None."""
    missing = [name for name in ("liger_kernel", "triton") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: {FIX}"
    if tuple(int(part) for part in numpy.__version__.split(".")[:2]) >= (2, 4):
        return (f"Triton's interpreter cannot run with numpy {numpy.__version__} (>= 2.4: it takes int() of a "
                f"one-element array): {FIX}")
    return None


def test_liger_cases_in_a_fresh_interpreter_process():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the cases run in this process")
    if reason := unavailable():
        pytest.skip(reason)
    here = str(Path(__file__).relative_to(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-vv", "-s", "-rs", here],
        cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout, out.stdout[-2000:]
    print(out.stdout[-8000:])  # with each case's deviations


@pytest.fixture(scope="module")
def liger():
    if reason := unavailable():
        pytest.skip(reason)
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Liger's kernels need Triton's interpreter (TRITON_INTERPRET=1 before triton is imported): "
                    "test_liger_cases_in_a_fresh_interpreter_process runs these cases in a fresh process")
    from liger_kernel.ops.attn_res import LigerAttnResFunction
    from liger_kernel.ops.mhc import LigerMHCCoeffsFunction, LigerMHCPostResFunction, LigerMHCPreFunction
    return SimpleNamespace(attn_res=LigerAttnResFunction.apply, coeffs=LigerMHCCoeffsFunction.apply,
                           pre=LigerMHCPreFunction.apply, post_res=LigerMHCPostResFunction.apply)


def deviations(mine, theirs, names):
    """Each pair's largest difference, relative to the largest entry of theirs (printed)."""
    devs = {name: ((a - b).abs().max() / b.abs().max()).item() for name, a, b in zip(names, mine, theirs, strict=True)}
    print("  " + ", ".join(f"{name} {dev:.1e}" for name, dev in devs.items()))
    return devs


def assert_match(mine, theirs, names):
    devs = deviations(mine, theirs, names)
    assert max(devs.values()) <= TOL, devs


def outputs_and_grads(outs, leaves, seed=1):
    """Each output set and the gradients of one random probe of it (the same for every set) to `leaves` (none:
    the outputs alone)."""
    if not leaves:
        return outs
    generator = torch.Generator().manual_seed(seed)
    probes = [torch.randn(out.shape, generator=generator) for out in outs[0]]
    return [[*out, *torch.autograd.grad(sum((o * p).sum() for o, p in zip(out, probes, strict=True)), leaves)]
            for out in outs]


# ---- AttnRes --------------------------------------------------------------------------------------------------

ATTNRES_ACCOUNTED = dict(prefix_sums=True, recency_bias=0.0)
ATTNRES_NAMES = ["output", "grad embeds", *(f"grad sublayer {s}" for s in range(6)), "grad query", "grad gain"]


def liger_attnres_pass(liger, method, embeds, weights, prefix_sums):
    """The paper's Block AttnRes with Liger's aggregator, which uses our pseudo-query w_a and key-norm gain g_a."""
    def aggregate(a, sources):
        sources = torch.stack(sources)
        return liger.attn_res(sources.cumsum(0) if prefix_sums else sources, method.query[a], method.gain[a],
                              method.eps)
    return paper_block_attnres(aggregate, embeds, weights)


def attnres_both(liger, prefix_sums, recency_bias, grads=True):
    method = attnres_away_from_init(recency_bias)
    weights = [(torch.randn(D, D) / D ** 0.5).requires_grad_() for _ in range(method.num_sublayers)]
    embeds = torch.randn(*TOKENS, D, requires_grad=True)
    mine = method.final(run_sublayers(method, embeds, weights))
    theirs = liger_attnres_pass(liger, method, embeds, weights, prefix_sums)
    return outputs_and_grads([[mine], [theirs]], [embeds, *weights, method.query, method.gain] if grads else [])


def test_block_attnres_matches_liger_with_the_differences_accounted_for(liger):
    assert_match(*attnres_both(liger, **ATTNRES_ACCOUNTED), ATTNRES_NAMES)


def attnres_output_deviation(liger, **undone):
    mine, theirs = attnres_both(liger, **{**ATTNRES_ACCOUNTED, **undone}, grads=False)
    return deviations(mine[:1], theirs[:1], ["output"])["output"]


@pytest.mark.parametrize("undone", [dict(prefix_sums=False), dict(recency_bias=attnres.RECENCY_BIAS_INIT)],
                         ids=["paper_block_sums", "our_initial_recency_bias"])
def test_each_attnres_difference_is_real(liger, undone):
    """Not accounted for, it moves the output a hundred times past the float32 disagreement of the accounted run."""
    assert attnres_output_deviation(liger, **undone) > 100 * max(attnres_output_deviation(liger), 1e-7)


# ---- mHC ------------------------------------------------------------------------------------------------------

N = 4  # streams
MHC_ACCOUNTED = dict(sinkhorn_eps=0.0, extra_iteration=0)
PARAMETER_NAMES = ["grad phi", "grad bias", "grad alpha"]


def liger_coefficients(liger, method, x, s, sinkhorn_eps, extra_iteration):
    """Liger's pre, post and res for sublayer s, from our parameters (phi transposed to its layout)."""
    a_pre, a_post, a_res = method.alpha[s]
    return liger.coeffs(x, method.phi[s].T, method.bias[s], a_pre, a_post, a_res, True,
                        method.sinkhorn_iters + extra_iteration, method.eps, 0.0, sinkhorn_eps, 2.0)


def streams(seed=2):
    x = torch.randn(*TOKENS, N, D, generator=torch.Generator().manual_seed(seed))
    return x.requires_grad_()


@pytest.mark.parametrize("iterations", [1, 20])
def test_mhc_coefficients_match_liger(liger, iterations):
    """pre, post and the Sinkhorn-projected mix of one sublayer, and their gradients (streams, phi, bias, alpha)."""
    method, x = mhc_away_from_init(iterations, N), streams()
    mine = method.coefficients(x, 1)
    theirs = liger_coefficients(liger, method, x, 1, **MHC_ACCOUNTED)
    assert all(t.dtype == torch.float32 for t in theirs)
    names = ["pre", "post", "res", "grad streams", *PARAMETER_NAMES]
    assert_match(*outputs_and_grads([mine, theirs], [x, method.phi, method.bias, method.alpha]), names)


def test_mhc_pre_mix_and_update_match_liger(liger):
    """Given coefficients (random, not doubly stochastic: each term counts), our read and write against Liger's
    pre-mix and post/residual update; outputs and gradients (streams, sublayer output, pre, post, res)."""
    method, x = mhc_away_from_init(20, N), streams()
    generator = torch.Generator().manual_seed(3)
    f, pre, post, res = (torch.randn(*TOKENS, *shape, generator=generator).requires_grad_()
                         for shape in [(D,), (N,), (N,), (N, N)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(method, "coefficients", lambda x, sublayer: (pre, post, res))
        stream = method.init(x[..., 0, :])  # a Streams holder; its x is replaced by the test's streams
        stream.x = x
        mine = [method.read(stream, 0), method.write(stream, 0, f).x]
    theirs = [liger.pre(x, pre), liger.post_res(x, f, post, res)]
    names = ["pre-mix", "update", "grad streams", "grad f", "grad pre", "grad post", "grad res"]
    assert_match(*outputs_and_grads([mine, theirs], [x, f, pre, post, res]), names)


def mhc_both(liger, iterations, sinkhorn_eps, extra_iteration, grads=True):
    """Our and Liger's streams after two stand-in sublayers (x @ W), and their gradients, same weights."""
    method = mhc_away_from_init(iterations, N)
    weights = [(torch.randn(D, D) / D ** 0.5).requires_grad_() for _ in range(2)]
    embeds = torch.randn(*TOKENS, D, requires_grad=True)
    stream = run_sublayers(method, embeds, weights)
    x = embeds.unsqueeze(2).expand(-1, -1, N, -1)  # our init: the embedding copied into each stream
    for s, weight in enumerate(weights):
        pre, post, res = liger_coefficients(liger, method, x, s, sinkhorn_eps, extra_iteration)
        x = liger.post_res(x, liger.pre(x, pre) @ weight, post, res)
    leaves = [embeds, *weights, method.phi, method.bias, method.alpha] if grads else []
    return outputs_and_grads([[stream.x], [x]], leaves)


MHC_NAMES = ["streams", "grad embeds", "grad sublayer 0", "grad sublayer 1", *PARAMETER_NAMES]


@pytest.mark.parametrize("iterations", [1, 20])
def test_mhc_pass_matches_liger_with_the_differences_accounted_for(liger, iterations):
    assert_match(*mhc_both(liger, iterations, **MHC_ACCOUNTED), MHC_NAMES)


def test_liger_sinkhorn_eps_is_real(liger):
    """Liger's default `sinkhorn_eps` lifts the mix's entries: by ten times more, relative to each entry, than the
    float32 disagreement of the accounted run (at two sublayers it moves the streams too little to tell)."""
    method, x = mhc_away_from_init(3, N), streams()
    mine = method.coefficients(x, 1)[2]

    def deviation(sinkhorn_eps):
        theirs = liger_coefficients(liger, method, x, 1, sinkhorn_eps, 0)[2]
        entrywise = ((mine - theirs).abs() / theirs.abs()).max().item()
        print(f"  sinkhorn_eps {sinkhorn_eps:g}: mix, of each entry {entrywise:.1e}")
        return entrywise
    assert deviation(LIGER_SINKHORN_EPS) > 10 * max(deviation(0.0), 1e-7)


def test_liger_tmax_counts_as_our_iterations(liger):
    """tmax = iterations + 1 moves the streams ten times past the float32 disagreement of tmax = iterations."""
    def deviation(extra_iteration):
        mine, theirs = mhc_both(liger, 3, 0.0, extra_iteration, grads=False)
        return deviations(mine[:1], theirs[:1], ["streams"])["streams"]
    assert deviation(1) > 10 * max(deviation(0), 1e-7)


# ---- our models on Liger's kernels ------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, switch", [
    (dict(cross_layer="mhc", mhc_streams=N), "mhc_impl"),  # Liger: n a power of two
    (dict(cross_layer="attnres", attnres_block_size=3, attnres_recency_bias=False), "attnres_impl"),
    (dict(cross_layer="attnres", attnres_block_size=3, attnres_recency_bias=False, attnres_sources="blocks"),
     "attnres_impl"),
], ids=["mhc", "attnres_prefix_sums", "attnres_paper"])
def test_a_model_switched_to_liger_matches_the_reference(liger, fields, switch):
    """Logits and every parameter's gradient of a two-layer model, the reference's and Liger's kernels'."""
    model = perturb_method(tiny_model(num_hidden_layers=2, **fields))
    ids = torch.randint(0, model.config.vocab_size, TOKENS, generator=torch.Generator().manual_seed(4))
    probe = torch.randn(*TOKENS, model.config.vocab_size, generator=torch.Generator().manual_seed(5))
    params = [param for _, param in sorted(model.named_parameters())]

    def logits_and_grads():
        logits = model(ids).logits
        return [logits, *torch.autograd.grad((logits * probe).sum(), params)]

    mine = logits_and_grads()
    model.switch_method_field(switch, "liger")
    names = ["logits", *(name for name, _ in sorted(model.named_parameters()))]
    devs = {name: ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
            for name, a, b in zip(names, mine, logits_and_grads(), strict=True)}
    print(f"  largest: {max(devs, key=devs.get)} {max(devs.values()):.1e}")
    # float32 through a whole model; mHC's final_logits gradient, a softmax gradient (its entries sum to zero),
    # cancels most: about 1e-5 of its largest entry, the rest under 1e-6
    assert max(devs.values()) <= 5e-5, devs
