"""MUDDFormer's module (descriptions/mudd.py): the dense connections' weights after every block, and the stream of
block outputs and the next block's ways.

Initialisation (the reference's training code): `W1` normal with std 1/sqrt(D), `W2` zero, `a_i` one on `X_i` and
zero elsewhere, so a fresh model computes exactly what the vanilla decoder with the same backbone weights computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .base import Residual, rms_normalize
from .descriptions.mudd import WAYS, MUDDDescription


@dataclass
class MuddStream:
    hidden: torch.Tensor                # (B, T, D) the current block's residual way, then plus its attention output
    outputs: list[torch.Tensor]         # X_0 (embedding), X_1, ...: the block outputs, (B, T, D) each
    ways: torch.Tensor | None = None    # (4, B, T, D) the next block's query, key, value and residual inputs


class MUDD(MUDDDescription, Residual):
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
