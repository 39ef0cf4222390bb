"""DenseFormer's module (descriptions/denseformer.py): the DWA weights and the stream of block outputs.

Initialisation: identity (the weight of `X_i` is 1, the others 0), so a fresh DenseFormer computes exactly
what the vanilla decoder with the same backbone weights computes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .base import Residual
from .descriptions.denseformer import DenseFormerDescription


@dataclass
class DenseFormerStream:
    hidden: torch.Tensor          # (B, T, D) the running hidden state (what the next sublayer reads)
    outputs: list[torch.Tensor]   # X_0 (embedding), X_1, ...: raw block outputs, (B, T, D) each


class DenseFormer(DenseFormerDescription, Residual):
    def __init__(self, config):
        super().__init__(config)
        self.dwas = self.dwa_sources(config)
        sizes = [len(sources) for sources in self.dwas.values()]
        ends = list(itertools.accumulate(sizes))
        self._weights_of = {i: (end - size, end) for i, size, end in zip(self.dwas, sizes, ends, strict=True)}
        self.alphas = nn.Parameter(torch.empty(sum(sizes)))  # every DWA's weights, one after the other

    def weights(self, block: int) -> torch.Tensor:
        start, end = self._weights_of[block]
        return self.alphas[start:end]

    def reset_parameters(self):
        identity = torch.zeros(self.alphas.shape, dtype=self.alphas.dtype, device=self.alphas.device)
        identity[[end - 1 for _, end in self._weights_of.values()]] = 1.0
        init.copy_(self.alphas, identity)

    def init(self, embeds):
        return DenseFormerStream(embeds, [embeds])

    def read(self, stream, sublayer):
        return stream.hidden

    def write(self, stream, sublayer, out):
        hidden = stream.hidden + out
        if sublayer % 2 == 0:  # attention: the block is not finished
            return DenseFormerStream(hidden, stream.outputs)
        block = sublayer // 2 + 1
        stream.outputs.append(hidden)
        if block in self._weights_of:
            xs = torch.stack([stream.outputs[m] for m in self.dwas[block]])  # (n, B, T, D)
            hidden = torch.tensordot(self.weights(block).to(xs.dtype), xs, dims=1)
        return DenseFormerStream(hidden, stream.outputs)

    def final(self, stream):
        return stream.hidden

    def hidden(self, stream):
        return stream.hidden
