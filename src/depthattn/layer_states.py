"""What a layer hands to the layers above it within one forward pass: its attention state (`DepthState`) and the
pass's store of those states (`DepthStates`), which every cross-layer method's hooks read and write
(methods/base.py), with the token ids and whatever else a method hands from step to step. Which steps a method
reads is its own (`AttentionMixer.step_sources`); Depth-Attention's mixing: `depthattn.ops.depth_mix`.
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
        state = self._states[step]
        if state is None:
            raise LookupError(f"step {step} has written no state yet in this pass: a layer reads a later step's "
                              "state (check the method's step_sources)")
        return state

    def __setitem__(self, step: int, state: DepthState):
        self._states[step] = state

