"""What mHC and hyper-connections share: n residual streams, read as a weighted sum, written as a stream mix plus
the sublayer output spread over the streams (their shared costs: descriptions/streams.py).

Per sublayer, from the streams `x` (B, T, n, D) before it, a method computes `pre` (B, T, n), `post` (B, T, n)
and `res` (B, T, n, n). The sublayer reads `sum_i pre_i x_i`; afterwards stream `i` becomes
`sum_j res_ij x_j + post_i * out`. Coefficients and mixes run in float32 at least; the read and the update are
ops/mhc's (`connections`: the reference, or a library's kernels where a method switches them).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from ..ops.mhc import MHC_IMPLS
from .base import Residual
from .descriptions.streams import MultiStreamDescription


@dataclass
class Streams:
    x: torch.Tensor                          # (B, T, n, D)
    post: torch.Tensor | None = None         # set by `read` for the following `write`
    res: torch.Tensor | None = None


class MultiStreamResidual(Residual, MultiStreamDescription):
    """The shared stream handling; a subclass defines `coefficients` and `final` besides what
    `MultiStreamDescription` leaves to it (`streams`, `coefficient_term`, `final_term`, `extra_parameters`)."""

    def __init__(self, config, num_streams: int):
        super().__init__(config)
        self.num_streams, self.connections = num_streams, MHC_IMPLS["reference"]

    @abc.abstractmethod
    def coefficients(self, x: torch.Tensor, sublayer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(pre, post, res) for the sublayer, from its input streams x (B, T, n, D)."""

    def init(self, embeds):
        return Streams(embeds.unsqueeze(-2).expand(*embeds.shape[:-1], self.num_streams, embeds.shape[-1]))

    def read(self, stream, sublayer):
        pre, stream.post, stream.res = self.coefficients(stream.x, sublayer)
        return self.connections.pre(stream.x, pre)

    def write(self, stream, sublayer, out):
        return Streams(self.connections.post_res(stream.x, out, stream.post, stream.res))

    def hidden(self, stream):
        return stream.x.mean(-2)
