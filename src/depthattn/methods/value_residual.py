"""Value residual's module (descriptions/value_residual.py): `V'_u = lambda_1 V_0 + lambda_2 V_u` for every unrolled
step `u >= 1`, with the lambdas at ResFormer's 0.5 each at initialisation."""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from .base import AttentionMixer
from .descriptions.value_residual import ValueResidualDescription

LAMBDA_INIT = 0.5


class ValueResidual(ValueResidualDescription, AttentionMixer):
    def __init__(self, config):
        super().__init__(config)
        self.lambdas = nn.Parameter(torch.empty(max(config.unrolled_depth - 1, 0), 2))

    def reset_parameters(self):
        init.constant_(self.lambdas, LAMBDA_INIT)

    def layer_mixing(self):
        lambdas = self.lambdas.detach()
        return {"λ1 (layer 0)": lambdas[:, 0].tolist(), "λ2 (own)": lambdas[:, 1].tolist()}

    def forward(self, attention, query, state, step, states):
        """V' = lambda_1 V_0 + lambda_2 V for this step's state; keys unchanged."""
        lambdas, first_value = self.lambdas[step - 1], states[0].value
        value = lambdas[0].to(state.value.dtype) * first_value + lambdas[1].to(state.value.dtype) * state.value
        return state._replace(value=value), None
