"""Block Attention Residuals (Kimi Team, arXiv 2603.15031), in the form docs/method.md#baselines fixes.

Before every sublayer `s >= 1` and once before the final norm, an aggregator reads a softmax mixture over
{block snapshots, running stream}: the running stream is the plain residual stream (embedding plus every sublayer
output so far); a snapshot of it is kept at the start and at every block end (every `attnres_block_size`
sublayers; attention and MLP count one each). Candidates are the snapshots taken before the current position
and the running stream. Logits are `<w * g, x> / rms(x)` with a pseudo-query `w` (zero at init) and an RMSNorm
gain `g` (ones), plus a recency bias `b` on the running stream (3.0 at init); softmax in float32. The
sublayer reads the mixture and adds its output to the running stream.

Sublayer 0 has one candidate (the embedding) and no aggregator. Parameters: `2 * unrolled_depth` aggregators
(sublayers 1 .. 2L-1 and the final one) of `2 * hidden_size + 1` each.
At initialisation each aggregator weighs the running stream `e^3 / (e^3 + m)` and each of its `m` snapshots
`1 / (e^3 + m)`: close to, but not exactly, the plain residual.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from ..config import ConfigField, check_int
from .base import FlopTerm, Residual, rms_normalize

RECENCY_BIAS_INIT = 3.0


@dataclass
class AttnResStream:
    hidden: torch.Tensor            # (B, T, D) the running (plain residual) stream
    snapshots: list[torch.Tensor]   # the running stream at the start and at each block end so far


class AttnRes(Residual):
    config_fields = {"attnres_block_size": ConfigField(12, "Sublayers (attention and MLP count one each) per block.")}
    checked_variants = {"blocks_of_3": {"attnres_block_size": 3}}  # several blocks in a tiny model
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: one snapshot of the "
        "stream per block, ceil(2L / block_size) hidden vectors (L = unrolled depth); over a prefill, T times that."
    )

    def __init__(self, config):
        super().__init__(config)
        self.block_size = config.attnres_block_size
        self.eps = config.rms_norm_eps
        count, size = self.num_sublayers, config.hidden_size  # aggregator a reads before sublayer a + 1
        self.query = nn.Parameter(torch.empty(count, size))
        self.gain = nn.Parameter(torch.empty(count, size))
        self.recency_bias = nn.Parameter(torch.empty(count))

    @classmethod
    def check_config(cls, config):
        check_int("attnres_block_size", config.attnres_block_size, 1)

    def reset_parameters(self):
        init.zeros_(self.query)
        init.ones_(self.gain)
        init.constant_(self.recency_bias, RECENCY_BIAS_INIT)

    @staticmethod
    def candidates(config, sublayer: int) -> int:
        """Candidates the aggregator before `sublayer` (2L: the final one) reads in our model: snapshots taken
        before it (the embedding and the running stream at each earlier block end) plus the running stream."""
        B = config.attnres_block_size
        return (sublayer - 1) // B + 2 if sublayer >= 1 else 1

    @staticmethod
    def snapshots(config) -> int:
        """Snapshots held at the end of a pass: the embedding and the stream at every block end but the last."""
        return (2 * config.unrolled_depth - 1) // config.attnres_block_size + 1

    @classmethod
    def extra_parameters(cls, config):
        return 2 * config.unrolled_depth * (2 * config.hidden_size + 1)  # per aggregator: w, gain, recency bias

    @classmethod
    def flop_terms(cls, config):
        # an aggregator over n candidates: logits <w*g, x>/rms(x) (2 n D) and the mixture (2 n D)
        D, S = config.hidden_size, 2 * config.unrolled_depth
        inner = sum(cls.candidates(config, s) for s in range(1, S))  # sublayers 1 .. 2L-1
        final = cls.candidates(config, S)
        return [
            FlopTerm("aggregator logits, sublayers 1..2L-1", 2 * D * inner, "matmul", "weights"),
            FlopTerm("aggregator mixtures, sublayers 1..2L-1", 2 * D * inner, "elementwise"),
            FlopTerm("aggregator before sublayer 0 (1 candidate): counted by the paper only", 4 * D, "elementwise",
                     "mix", model=False),
            FlopTerm("final aggregator logits (before the final norm): in our model only", 2 * D * final, "matmul",
                     "weights", paper=False),
            FlopTerm("final aggregator mixture: in our model only", 2 * D * final, "elementwise", paper=False),
        ]

    @classmethod
    def io_elements(cls, config):
        # paper convention: aggregators before sublayers 0 .. 2L-1 (see depthattn.evaluate.costs); each reads its
        # candidates twice (logits pass, mixture pass) and writes the mixture
        D, S = config.hidden_size, 2 * config.unrolled_depth
        candidates = sum(cls.candidates(config, s) for s in range(S))
        return {"read": 2 * D * candidates, "write": D * S}

    @classmethod
    def extra_state_elements(cls, config, context):
        return cls.snapshots(config) * context * config.hidden_size  # one snapshot of the stream per block

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
