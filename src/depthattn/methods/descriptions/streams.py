"""What the descriptions of mHC and hyper-connections share: the costs of n residual streams, read as a weighted sum,
written as a stream mix plus the sublayer output spread over the streams (methods/streams.py runs them)."""

from __future__ import annotations

import abc

from .base import FlopTerm, ResidualDescription


class MultiStreamDescription(ResidualDescription):
    """The shared costs; a subclass defines `streams`, `coefficient_term` and `final_term` (abstract: `register`
    refuses a class without one), besides `extra_parameters`."""

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
