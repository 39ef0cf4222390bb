"""Depth-Attention's module (its description, config fields and costs: descriptions/depth_attention.py): the
learned score bias or linear weights, when there are any, and the depth mix before sequence attention.

Initialisation: nothing to initialise; the optional score bias starts at zero, i.e. plain Depth-Attention, or
with each layer's own entry at `depth_self_bias_init` (docs/method.md#retrofitting); linear weights start at
1/n each, the plain average over the n candidates.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn
from transformers import initialization as init

from ..ops import get_depth_mix
from .base import AttentionMixer
from .descriptions.depth_attention import DepthAttentionDescription, depth_sources, resolved_depth_stride

__all__ = ["DepthAttention", "depth_sources", "resolved_depth_stride"]


class DepthAttention(DepthAttentionDescription, AttentionMixer):
    def __init__(self, config):
        super().__init__(config)
        self.depth_mix = get_depth_mix(config.depth_impl)
        self.rule, self.mix_states = config.depth_mix, config.depth_mix_states
        # the score bias or the linear weights: per step with sources, one value per source and one for the step
        # itself (last), one after the other in a single vector (transformers initialises a method's own parameters)
        sizes = {u: len(sources) + 1 for u, sources in enumerate(self.sources) if sources}
        self.mix_slices = {u: slice(end - size, end) for (u, size), end in
                           zip(sizes.items(), itertools.accumulate(sizes.values()), strict=True)}
        learned = config.depth_score_bias or self.rule == "linear"
        self.learned_mix = nn.Parameter(torch.zeros(sum(sizes.values()))) if learned else None
        self.self_bias_init = config.depth_self_bias_init

    def reset_parameters(self):
        """Linear weights at 1/n; score biases with the sources at zero and each step's own entry at
        `depth_self_bias_init` (guarded: loaded values stay)."""
        if self.learned_mix is None:
            return
        start = torch.zeros_like(self.learned_mix)
        for part in self.mix_slices.values():
            if self.rule == "linear":
                start[part] = 1.0 / (part.stop - part.start)
            else:
                start[part.stop - 1] = self.self_bias_init
        init.copy_(self.learned_mix, start)

    def switch(self, name, value):
        self.depth_mix = get_depth_mix(value)  # name: depth_impl

    def forward(self, attention, query, state, step, states):
        bias = self.learned_mix[self.mix_slices[step]] if self.learned_mix is not None else None
        return self.depth_mix(query, state, [states[j] for j in self.sources[step]], attention.scaling,
                              rule=self.rule, mix_states=self.mix_states, score_bias=bias,
                              need_weights=states.need_weights)
