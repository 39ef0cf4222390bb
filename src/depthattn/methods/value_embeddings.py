"""Value embeddings' module (descriptions/value_embeddings.py): the tables and the lambdas, and
`V'_u = lambda_1 V_u + lambda_2 E_t(u)[token]` at the chosen steps.

Initialisation: the tables as the token embeddings (normal, std `initializer_range`; the speedrun's 2026 records
start them at std 0.01), lambda = (0.5, 0.5) as in the speedrun's records of 2025.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from .base import AttentionMixer
from .descriptions.value_embeddings import ValueEmbeddingsDescription, speedrun_pattern

__all__ = ["ValueEmbeddings", "speedrun_pattern"]

LAMBDA_INIT = 0.5


class ValueEmbeddings(ValueEmbeddingsDescription, AttentionMixer):
    def __init__(self, config):
        super().__init__(config)
        self.tables_of = self.layer_tables(config)
        self.chosen = {u: i for i, u in enumerate(u for u, t in enumerate(self.tables_of) if t is not None)}
        width = config.num_key_value_heads * config.head_dim
        self.tables = nn.Parameter(torch.empty(self.table_count(config), config.vocab_size, width))
        self.lambdas = nn.Parameter(torch.empty(len(self.chosen), 2))
        self.std = config.initializer_range

    def reset_parameters(self):
        init.normal_(self.tables, std=self.std)
        init.constant_(self.lambdas, LAMBDA_INIT)

    def layer_mixing(self):
        lambdas = self.lambdas.detach()
        own, embedded = [1.0] * len(self.tables_of), [0.0] * len(self.tables_of)
        for u, i in self.chosen.items():
            own[u], embedded[u] = lambdas[i].tolist()
        return {"λ1 (own)": own[1:], "λ2 (value embedding)": embedded[1:]}

    def acts_at(self, step):
        return step in self.chosen

    def forward(self, attention, query, state, step, states):
        """V' = lambda_1 V + lambda_2 E[token] for this step's state; keys unchanged."""
        if states.token_ids is None:
            raise ValueError("value embeddings are looked up from the token ids: pass input_ids, not inputs_embeds")
        batch, num_kv_heads, seq_len, head_dim = state.value.shape
        embedded = self.tables[self.tables_of[step]][states.token_ids]  # (B, T, Hkv * d)
        embedded = embedded.view(batch, seq_len, num_kv_heads, head_dim).transpose(1, 2).to(state.value.dtype)
        lambdas = self.lambdas[self.chosen[step]].to(state.value.dtype)
        return state._replace(value=lambdas[0] * state.value + lambdas[1] * embedded), None
