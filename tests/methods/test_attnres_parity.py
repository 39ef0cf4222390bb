"""Our Block AttnRes against fla-core's reference aggregator, `fla.ops.attnres.naive.naive_attnres`, weight for
weight, over a whole pass of stand-in sublayers: outputs and gradients. Both in float32: theirs computes in float32
from any dtype (`.float()`).

fla's op is one aggregator, `sum_i softmax_i(<w, rmsnorm_g(v_i)>) v_i` over the sources it is given; which states
are sources is left to its caller. The test drives it with the paper's block bookkeeping (Kimi Team, arXiv
2603.15031: the embedding, each completed block's sum of sublayer outputs, the current block's partial sum) and
accounts for where ours differs (docs/method.md, AttnRes); `test_each_difference_is_real` undoes one at a time:
- sources: ours reads the running stream and snapshots of it at the block ends, i.e. the prefix sums of the paper's
  sources (embedding, embedding + block 1, ...), as keys and as values. Accounted for by handing fla the prefix sums.
- recency bias: ours adds a learned bias (3.0 at init) to the running stream's logit; the paper and fla have none.
  Accounted for by our bias = 0.
Both sides also aggregate before the final norm (ours does; fla's op says nothing about it), and neither before
sublayer 0 (the paper's aggregator there has one source, the embedding, so it returns it).
Our paper form (preset `attnres_paper`: block sums as sources, no recency bias) matches with nothing accounted for.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from depthattn.methods import attnres
from depthattn.presets import METHOD_PRESETS
from tests.methods.parity import D, attnres_away_from_init, paper_block_attnres, run_sublayers

fla = pytest.importorskip("fla", reason="fla-core (the dev extra) is not installed")
# fla.ops' __init__ imports every Triton kernel; the reference path needs only torch and einops, so load its file
_spec = importlib.util.spec_from_file_location("fla_attnres_naive", Path(fla.__file__).parent / "ops/attnres/naive.py")
naive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naive)

TOL = 2e-6   # float32, of each tensor's largest entry
ACCOUNTED = dict(prefix_sums=True, recency_bias=0.0)
PAPER = {field: value for field, value in METHOD_PRESETS["attnres_paper"].items() if field != "cross_layer"}


def their_pass(method, embeds, weights, prefix_sums):
    """The paper's Block AttnRes with fla's aggregator, which uses our pseudo-query w_a and key-norm gain g_a."""
    def aggregate(a, sources):
        if prefix_sums:
            sources = list(torch.stack(sources).cumsum(0))
        return naive.naive_attnres(method.query[a], sources, method.gain[a], rms_eps=method.eps)
    return paper_block_attnres(aggregate, embeds, weights)


def both(prefix_sums, recency_bias):
    """Our and their final hidden state and its gradients (embeddings, sublayers, query, gain), same weights."""
    method = attnres_away_from_init(recency_bias)
    weights = [(torch.randn(D, D) / D ** 0.5).requires_grad_() for _ in range(method.num_sublayers)]
    embeds = torch.randn(2, 7, D, requires_grad=True)
    leaves, probe = [embeds, *weights, method.query, method.gain], torch.randn(2, 7, D)
    outs = method.final(run_sublayers(method, embeds, weights)), their_pass(method, embeds, weights, prefix_sums)
    return [[out, *torch.autograd.grad((out * probe).sum(), leaves)] for out in outs]


def test_block_attnres_matches_fla_with_the_differences_accounted_for():
    mine, theirs = both(**ACCOUNTED)
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):  # output, then gradients in `leaves` order
        torch.testing.assert_close(a, b, rtol=0, atol=TOL * b.abs().max().item(), msg=lambda m, i=i: f"tensor {i}: {m}")


def output_deviation(**undone):
    mine, theirs = both(**{**ACCOUNTED, **undone})
    return ((mine[0] - theirs[0]).abs().max() / theirs[0].abs().max()).item()


@pytest.mark.parametrize("undone", [dict(prefix_sums=False), dict(recency_bias=attnres.RECENCY_BIAS_INIT)],
                         ids=["paper_block_sums", "our_initial_recency_bias"])
def test_each_difference_is_real(undone):
    """Not accounted for, it moves the output a hundred times past the float32 disagreement of the accounted run."""
    assert output_deviation(**undone) > 100 * max(output_deviation(), 1e-7)


def test_our_paper_form_matches_fla_with_nothing_accounted_for():
    method = attnres_away_from_init(**PAPER)
    weights = [(torch.randn(D, D) / D ** 0.5).requires_grad_() for _ in range(method.num_sublayers)]
    embeds = torch.randn(2, 7, D, requires_grad=True)
    leaves, probe = [embeds, *weights, method.query, method.gain], torch.randn(2, 7, D)
    outs = method.final(run_sublayers(method, embeds, weights)), their_pass(method, embeds, weights, False)
    for out_grads in zip(*([out, *torch.autograd.grad((out * probe).sum(), leaves)] for out in outs), strict=True):
        mine, theirs = out_grads
        torch.testing.assert_close(mine, theirs, rtol=0, atol=TOL * theirs.abs().max().item())
