"""Depth-Attention's vocabulary: the state a layer hands to the layers above it, and which layers it reads
(docs/method.md#the-operation). The mixing itself: `depthattn.ops.depth_mix` (reference in `naive.py`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class DepthState(NamedTuple):
    """What one layer hands to the layers above it, for the tokens of the current forward pass only."""

    score_key: torch.Tensor  # (B, Hkv, T, d) the layer's own key, compared with later queries
    key: torch.Tensor        # (B, Hkv, T, d) the key it attends with (mixed when depth_mix_states mixes keys)
    value: torch.Tensor      # (B, Hkv, T, d) the value it attends with (mixed when depth_mix_states mixes values)


class DepthStates:
    """The states of the unrolled steps that a later step reads, for the tokens of the current forward pass.
    Attentions write and read them as they do the KV cache. A plain object rather than a list, so that wrappers
    which rebuild a layer's list and dict arguments (FSDP's input casting) hand every layer the same one."""

    def __init__(self, depth: int, need_weights: bool = True, token_ids: torch.Tensor | None = None):
        self._states: list[DepthState | None] = [None] * depth
        self.need_weights = need_weights  # whether this forward records depth weights (else mixing may skip them)
        self.token_ids = token_ids  # (B, T) the current tokens, for a method that reads them; None with inputs_embeds
        self.more: dict = {}  # anything else a method hands from step to step within the pass, under its own keys

    def __getitem__(self, step: int) -> DepthState:
        return self._states[step]

    def __setitem__(self, step: int, state: DepthState):
        self._states[step] = state


def depth_sources(layer_idx: int, stride: int, window: int = 0) -> list[int]:
    """Earlier layers that layer `layer_idx` mixes from: multiples of `stride` and the `window` layers below it."""
    if stride <= 1:
        return list(range(layer_idx))
    return [j for j in range(layer_idx) if j % stride == 0 or j >= layer_idx - window]
