"""What mHC and hyper-connections share: n residual streams, read as a weighted sum, written as a stream mix plus
the sublayer output spread over the streams.

Per sublayer, from the streams `x` (B, T, n, D) before it, a method computes `pre` (B, T, n), `post` (B, T, n)
and `res` (B, T, n, n). The sublayer reads `sum_i pre_i x_i`; afterwards stream `i` becomes
`sum_j res_ij x_j + post_i * out`. Coefficients and mixes run in float32 at least.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from .base import FlopTerm, Residual


@dataclass
class Streams:
    x: torch.Tensor                          # (B, T, n, D)
    post: torch.Tensor | None = None         # set by `read` for the following `write`
    res: torch.Tensor | None = None


class MultiStreamResidual(Residual):
    """The shared stream handling; a subclass defines `streams`, `coefficient_term`, `final_term`, `coefficients`
    (abstract: `register` refuses a class without one) and `final`, besides `extra_parameters`."""

    def __init__(self, config, num_streams: int):
        super().__init__(config)
        self.num_streams = num_streams

    @classmethod
    @abc.abstractmethod
    def streams(cls, config) -> int:
        """n, the number of residual streams."""

    @classmethod
    @abc.abstractmethod
    def coefficient_term(cls, config) -> FlopTerm:
        """The FLOPs of computing pre, post and res, over every sublayer."""

    @classmethod
    @abc.abstractmethod
    def final_term(cls, config) -> FlopTerm:
        """The FLOPs of merging the streams before the final norm."""

    @classmethod
    def flop_terms(cls, config):
        n, D, S = cls.streams(config), config.hidden_size, 2 * config.unrolled_depth
        return [
            cls.coefficient_term(config),
            FlopTerm("pre: sublayer input sum_i pre_i x_i (2 n D) per sublayer", S * 2 * n * D, "elementwise"),
            FlopTerm("res: stream mix res @ x (2 n^2 D) per sublayer", S * 2 * n * n * D, "matmul"),
            FlopTerm("post: streams += post_i * out (2 n D) per sublayer", S * 2 * n * D, "elementwise"),
            cls.final_term(config),
        ]

    @classmethod
    def io_elements(cls, config):
        n, D, S = cls.streams(config), config.hidden_size, 2 * config.unrolled_depth
        coefficients = 2 * n + n * n
        # per sublayer, D-vectors: coefficients read the n streams; pre reads n, writes 1; res reads n, writes n;
        # post + merge reads the n mixed streams and the output, writes n. Minus vanilla's residual add (reads
        # x and out, writes x). Coefficient scalars are written by their projection and read back.
        read = (4 * n + 1 - 2) * D + coefficients
        write = (2 * n + 1 - 1) * D + coefficients
        return {"read": S * read, "write": S * write}

    @classmethod
    def extra_state_elements(cls, config, context):
        return (cls.streams(config) - 1) * context * config.hidden_size  # n - 1 extra residual streams

    @abc.abstractmethod
    def coefficients(self, x: torch.Tensor, sublayer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(pre, post, res) for the sublayer, from its input streams x (B, T, n, D)."""

    def init(self, embeds):
        return Streams(embeds.unsqueeze(-2).expand(*embeds.shape[:-1], self.num_streams, embeds.shape[-1]))

    def read(self, stream, sublayer):
        pre, stream.post, stream.res = self.coefficients(stream.x, sublayer)
        return (pre[..., None] * stream.x).sum(-2).to(stream.x.dtype)

    def write(self, stream, sublayer, out):
        x = stream.res @ stream.x.to(stream.res.dtype) + stream.post[..., None] * out[..., None, :]
        return Streams(x.to(stream.x.dtype))

    def hidden(self, stream):
        return stream.x.mean(-2)
