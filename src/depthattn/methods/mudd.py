"""MUDDFormer's multiway dynamic dense connections (Xiao et al., arXiv 2502.12170).

After block `i` (1-based, over the unrolled depth), weights per token are computed from its output `X_i`, over all
earlier outputs `X_0` (the embedding) .. `X_i`, separately for each input of the next block: its queries, keys,
values and residual ("qkvr"):

    A_i = GELU(rmsnorm(X_i) W1_i) W2_i + a_i          (B, T, C, i + 1), C = 4 ways (1 after the last block)
    X^c = sum_j A_i[c, j] X_j                         for c in q, k, v, r

The next block's attention reads its queries from `X^q`, keys from `X^k`, values from `X^v` (each through the layer's
attention norm), adds its output to `X^r`, and its MLP sublayer is the plain one. After the last block a single
residual way feeds the final norm. `rmsnorm` has no gain. Block 1 reads the embedding for every way.

Parameters, per block i: `W1_i` (D x K_i), `W2_i` (K_i x C (i + 1)), `a_i` (C (i + 1)), with K_i = C (i + 1)
(4 C (i + 1) after the last block, the released models' `expand_last`). The released models also round K up to a
multiple of 64, give the three ways their own attention norms and widen the MLP with depth; here K is the paper's
C (i + 1), the ways share the layer's attention norm (the backbone keeps Qwen3's keys), and the MLP is the
backbone's.
Initialisation (the reference's training code): `W1` normal with std 1/sqrt(D), `W2` zero, `a_i` one on `X_i` and
zero elsewhere, so a fresh model computes exactly what the vanilla decoder with the same backbone weights computes.
Inference state: no state across tokens (the KV cache is vanilla's); while a token is processed, the embedding and
every block output so far, and the query, key and value ways beside the residual one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .base import FlopTerm, Residual, rms_normalize

WAYS = 4  # query, key, value, residual
LAST_EXPAND = 4  # the hidden width after the last block is 4 x its ways x sources


@dataclass
class MuddStream:
    hidden: torch.Tensor                # (B, T, D) the current block's residual way, then plus its attention output
    outputs: list[torch.Tensor]         # X_0 (embedding), X_1, ...: the block outputs, (B, T, D) each
    ways: torch.Tensor | None = None    # (4, B, T, D) the next block's query, key, value and residual inputs


class MUDD(Residual):
    inference_state = (
        "Across tokens: none (the KV cache is vanilla's). Per token while it is processed: the embedding and every "
        "block output so far, and the query, key and value ways beside the residual one: up to L + 3 hidden vectors "
        "(L = unrolled depth); over a prefill of T tokens, T times that."
    )

    @staticmethod
    def shapes(config) -> list[tuple[int, int, int]]:
        """(ways C, sources n, hidden width K) of the dense connection after each block 1 .. L."""
        depth = config.unrolled_depth
        shapes = []
        for block in range(1, depth + 1):
            ways, sources = (WAYS, block + 1) if block < depth else (1, block + 1)
            shapes.append((ways, sources, ways * sources * (LAST_EXPAND if block == depth else 1)))
        return shapes

    def __init__(self, config):
        super().__init__(config)
        self.eps = config.rms_norm_eps
        self.blocks = len(self.shapes(config))
        for block, (ways, sources, width) in enumerate(self.shapes(config), start=1):
            self.register_parameter(f"proj_in_{block}", nn.Parameter(torch.empty(config.hidden_size, width)))
            self.register_parameter(f"proj_out_{block}", nn.Parameter(torch.empty(width, ways * sources)))
            self.register_parameter(f"static_{block}", nn.Parameter(torch.empty(ways * sources)))  # a vector: no decay

    def block_parameters(self, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """W1, W2 and a (as (C, n)) of the dense connection after block `block` (1-based)."""
        proj_out = getattr(self, f"proj_out_{block}")
        static = getattr(self, f"static_{block}")
        ways = WAYS if block < self.blocks else 1
        return getattr(self, f"proj_in_{block}"), proj_out, static.view(ways, -1)

    def reset_parameters(self):
        for block in range(1, self.blocks + 1):
            proj_in, proj_out, static = self.block_parameters(block)
            init.normal_(proj_in, std=proj_in.shape[0] ** -0.5)
            init.zeros_(proj_out)
            identity = torch.zeros(static.shape, dtype=static.dtype, device=static.device)
            identity[:, -1] = 1.0  # every way starts as the block's own output: the plain residual
            init.copy_(getattr(self, f"static_{block}"), identity.flatten())

    def layer_mixing(self):
        """The static weights a_i of the residual way over X_0 .. X_i, per block (the dynamic part varies by token)."""
        statics = [self.block_parameters(block)[2][-1].detach() for block in range(1, self.blocks + 1)]
        return {f"X_{j}": [s[j].item() if j < len(s) else 0.0 for s in statics] for j in range(len(statics[-1]))}

    def weights(self, x: torch.Tensor, block: int) -> torch.Tensor:
        """(B, T, C, n) weights of the dense connection after block `block` (1-based), from its output x, in float32
        at least."""
        proj_in, proj_out, static = self.block_parameters(block)
        normed = rms_normalize(x, self.eps)
        hidden = nn.functional.gelu(normed @ proj_in.to(normed.dtype))
        return (hidden @ proj_out.to(normed.dtype)).view(*x.shape[:-1], *static.shape) + static.to(normed.dtype)

    def init(self, embeds):
        return MuddStream(embeds, [embeds])

    def read(self, stream, sublayer):
        if sublayer % 2 == 0 and stream.ways is not None:
            return stream.ways[0]
        return stream.hidden

    def read_key_value(self, stream, sublayer):
        if sublayer % 2 == 0 and stream.ways is not None:
            return stream.ways[1], stream.ways[2]
        return None

    def write(self, stream, sublayer, out):
        hidden = stream.hidden + out
        if sublayer % 2 == 0:  # attention: the block goes on with its MLP
            return MuddStream(hidden, stream.outputs)
        outputs = [*stream.outputs, hidden]
        weights = self.weights(hidden, len(outputs) - 1)  # (B, T, C, n)
        ways = torch.einsum("btcn,nbtd->cbtd", weights, torch.stack(outputs).to(weights.dtype)).to(hidden.dtype)
        return MuddStream(ways[-1], outputs, ways if len(ways) == WAYS else None)

    def final(self, stream):
        return stream.hidden  # the residual way after the last block

    def hidden(self, stream):
        return stream.outputs[-1]

    @classmethod
    def extra_parameters(cls, config):
        D = config.hidden_size
        return sum(D * K + K * C * n + C * n for C, n, K in cls.shapes(config))

    @classmethod
    def flop_terms(cls, config):
        D, shapes = config.hidden_size, cls.shapes(config)
        return [
            FlopTerm("dense weights: rmsnorm(X_i) W1 W2, 2 D K + 2 K C n per block", sum(
                2 * D * K + 2 * K * C * n for C, n, K in shapes), "matmul", "weights"),
            FlopTerm("dense mixes: C ways over n outputs, 2 C n D per block",
                     sum(2 * C * n * D for C, n, _ in shapes), "matmul"),
        ]

    @classmethod
    def io_elements(cls, config):
        # per block: the weights read X_i; each way reads the n outputs and writes one vector
        D, shapes = config.hidden_size, cls.shapes(config)
        return {"read": D * sum(1 + C * n for C, n, _ in shapes), "write": D * sum(C for C, _, _ in shapes)}

    @classmethod
    def extra_state_elements(cls, config, context):
        # during the last block: X_0 .. X_{L-1} and the q, k, v ways, beside the residual stream vanilla has too
        return (config.unrolled_depth + 3) * context * config.hidden_size
