"""AttnRes's module (descriptions/attnres.py): the aggregators (pseudo-query, gain, recency bias) and the stream
with its block snapshots.

Initialisation: pseudo-queries at zero, gains at one, recency biases at 3.0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .base import Residual, rms_normalize
from .descriptions.attnres import AttnResDescription

RECENCY_BIAS_INIT = 3.0


@dataclass
class AttnResStream:
    hidden: torch.Tensor            # (B, T, D) the running (plain residual) stream
    snapshots: list[torch.Tensor]   # the running stream at the start and at each block end so far


class AttnRes(AttnResDescription, Residual):
    def __init__(self, config):
        super().__init__(config)
        self.block_size = config.attnres_block_size
        self.eps = config.rms_norm_eps
        count, size = self.num_sublayers, config.hidden_size  # aggregator a reads before sublayer a + 1
        self.query = nn.Parameter(torch.empty(count, size))
        self.gain = nn.Parameter(torch.empty(count, size))
        self.recency_bias = nn.Parameter(torch.empty(count))

    def reset_parameters(self):
        init.zeros_(self.query)
        init.ones_(self.gain)
        init.constant_(self.recency_bias, RECENCY_BIAS_INIT)

    def snapshot_count(self, sublayer: int) -> int:
        """Snapshots the aggregator before `sublayer` reads: those taken at positions 0, b, 2b, ... < sublayer."""
        return 0 if sublayer == 0 else (sublayer - 1) // self.block_size + 1

    def weights(self, candidates: torch.Tensor, sublayer: int) -> torch.Tensor:
        """candidates: (n, B, T, D), the running stream last. Returns (n, B, T) softmax weights, float32 at least."""
        a = sublayer - 1
        normed = rms_normalize(candidates, self.eps)
        logits = normed @ (self.query[a] * self.gain[a]).to(normed.dtype)  # (n, B, T)
        logits = torch.cat([logits[:-1], logits[-1:] + self.recency_bias[a].to(normed.dtype)])
        return torch.softmax(logits, dim=0)

    def init(self, embeds):
        return AttnResStream(embeds, [embeds])

    def read(self, stream, sublayer):
        if sublayer == 0:
            return stream.hidden
        candidates = torch.stack([*stream.snapshots[:self.snapshot_count(sublayer)], stream.hidden])
        weights = self.weights(candidates, sublayer)
        return (weights[..., None] * candidates).sum(0).to(stream.hidden.dtype)

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
