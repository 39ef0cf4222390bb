"""AttnRes's module (descriptions/attnres.py): the aggregators (pseudo-query, gain, recency bias) and the stream
with its block snapshots; each aggregator is computed by ops/attnres (`attnres_impl`).

Initialisation: pseudo-queries at zero, gains at one, recency biases at 3.0.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from ..ops.attnres import ATTNRES_IMPLS, attnres_mix, attnres_weights
from ..ops.library_kernels import check_library_kernels
from .base import Residual
from .descriptions.attnres import AttnResDescription

RECENCY_BIAS_INIT = 3.0


@dataclass
class AttnResStream:
    hidden: torch.Tensor            # (B, T, D) the running (plain residual) stream
    snapshots: list[torch.Tensor]   # the running stream at the start and at each block end so far


class AttnRes(AttnResDescription, Residual):
    def __init__(self, config):
        super().__init__(config)
        self.block_size, self.eps = config.attnres_block_size, config.rms_norm_eps
        self.block_sums = config.attnres_sources == "blocks"
        count, size = self.num_sublayers, config.hidden_size  # aggregator a reads before sublayer a + 1
        self.query = nn.Parameter(torch.empty(count, size))
        self.gain = nn.Parameter(torch.empty(count, size))
        self.recency_bias = nn.Parameter(torch.empty(count)) if config.attnres_recency_bias else None
        self.switch("attnres_impl", config.attnres_impl)

    def switch(self, name, value):
        self.impl, self.aggregate = value, ATTNRES_IMPLS[value]  # name: attnres_impl

    def reset_parameters(self):
        init.zeros_(self.query)
        init.ones_(self.gain)
        if self.recency_bias is not None:
            init.constant_(self.recency_bias, RECENCY_BIAS_INIT)

    def snapshot_count(self, sublayer: int) -> int:
        """Snapshots the aggregator before `sublayer` reads: those taken at positions 0, b, 2b, ... < sublayer."""
        return 0 if sublayer == 0 else (sublayer - 1) // self.block_size + 1

    def sources(self, stream: AttnResStream, sublayer: int) -> list[torch.Tensor]:
        """What the aggregator before `sublayer` mixes, the most recent last: the snapshots and the running stream
        (prefix sums), or their differences (the embedding, each completed block's sum, the current partial sum)."""
        prefix = [*stream.snapshots[:self.snapshot_count(sublayer)], stream.hidden]
        if not self.block_sums:
            return prefix
        return [prefix[0], *(later - earlier for earlier, later in itertools.pairwise(prefix))]

    def weights(self, candidates: torch.Tensor, sublayer: int) -> torch.Tensor:
        """candidates: (n, B, T, D), the most recent last. Returns (n, B, T) softmax weights, float32 at least."""
        a = sublayer - 1
        bias = None if self.recency_bias is None else self.recency_bias[a]
        return attnres_weights(self.query[a], candidates, self.gain[a], self.eps, bias)

    def init(self, embeds):
        check_library_kernels("attnres_impl", self.impl, embeds.device)
        return AttnResStream(embeds, [embeds])

    def read(self, stream, sublayer):
        if sublayer == 0:
            return stream.hidden
        sources = self.sources(stream, sublayer)
        if self.aggregate is ATTNRES_IMPLS["reference"]:  # the only one with a recency bias (config checks)
            candidates = torch.stack(sources)
            return attnres_mix(self.weights(candidates, sublayer), candidates)
        a = sublayer - 1
        return self.aggregate(self.query[a], sources, self.gain[a], self.eps)

    def write(self, stream, sublayer, out):
        hidden = stream.hidden + out
        done = sublayer + 1
        if done % self.block_size == 0 and done < self.num_sublayers:
            stream.snapshots.append(hidden)
        return AttnResStream(hidden, stream.snapshots)

    def final(self, stream):
        return self.read(stream, self.num_sublayers)

    def hidden(self, stream):
        return stream.hidden
