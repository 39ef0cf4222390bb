"""What the parity tests of our baselines against other implementations share (test_attnres_parity.py,
test_liger_parity.py, test_mhc_parity.py): our methods set away from their initialisation, our pass over stand-in
sublayers, and the paper's Block AttnRes bookkeeping around someone else's aggregator. Imports nothing optional, so
each test skips on its own."""

import torch

from depthattn.methods import attnres, mhc
from tests.helpers import tiny_config

D = 32             # tiny_config's hidden size
ATTNRES_BLOCK = 2  # sublayers per block: three blocks over three layers


def attnres_away_from_init(recency_bias=None, **fields):
    """Our AttnRes over three layers in blocks of two sublayers, its queries and gains random, its recency bias set
    (where it has one: `fields` may turn it off)."""
    torch.manual_seed(0)
    config = tiny_config(cross_layer="attnres", attnres_block_size=ATTNRES_BLOCK, num_hidden_layers=3, **fields)
    method = attnres.AttnRes(config)
    with torch.no_grad():  # away from the zero-query init (trained values), so that every term matters
        method.query.normal_(0, D ** -0.5)
        method.gain.uniform_(0.5, 1.5)
        if method.recency_bias is not None:
            method.recency_bias.fill_(recency_bias)
    return method


def run_sublayers(method, embeds, weights):
    """Our streams after stand-in sublayers `x @ weight`, before the final merge."""
    stream = method.init(embeds)
    for s, weight in enumerate(weights):
        stream = method.write(stream, s, method.read(stream, s) @ weight)
    return stream


def paper_block_attnres(aggregate, embeds, weights):
    """The paper's Block AttnRes (Kimi Team, arXiv 2603.15031) over stand-in sublayers `x @ weight`: the sources
    are the embedding, each completed block's sum of sublayer outputs and the current block's partial sum.
    `aggregate(a, sources)` is aggregator a, before sublayer a + 1 (the last before the final norm)."""
    blocks, partial = [embeds], None  # completed blocks (the embedding first) and the current block's partial sum

    def sources():
        return blocks + ([] if partial is None else [partial])

    for s, weight in enumerate(weights):
        out = (embeds if s == 0 else aggregate(s - 1, sources())) @ weight
        partial = out if partial is None else partial + out
        if (s + 1) % ATTNRES_BLOCK == 0 and s + 1 < len(weights):
            blocks, partial = blocks + [partial], None
    return aggregate(len(weights) - 1, sources())


def mhc_away_from_init(iterations, streams):
    """Our mHC over one layer (sublayers 0 and 1: its attention and MLP), every parameter random."""
    torch.manual_seed(0)
    config = tiny_config(cross_layer="mhc", mhc_streams=streams, mhc_sinkhorn_iters=iterations, num_hidden_layers=1)
    method = mhc.MHC(config)
    with torch.no_grad():  # away from the near-residual init (trained values), so that every term matters
        method.phi.normal_(0, method.phi.shape[-1] ** -0.5)
        method.bias.normal_(0, 0.5)
        method.alpha.uniform_(0.5, 1.5)
        method.final_logits.normal_()
    return method
