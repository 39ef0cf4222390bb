"""MoDA's module (its description, config field and costs: descriptions/moda.py): the MLP slots' key and value
projections, and the combined softmax over the sequence and the depth slots (ops/moda).

Initialisation: normal, std `initializer_range`, as the backbone's linear layers (the public code: N(0, 0.02)).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from ..ops.attention import eager_attention_forward
from ..ops.moda import MODA_IMPLS
from ..ops.rotary import apply_rotary
from .base import AttentionMixer, rms_normalize
from .descriptions.moda import MoDADescription

MLP_SLOT = "moda_mlp"  # the key of the MLP slots in the forward pass's states


class MoDA(MoDADescription, AttentionMixer):
    def __init__(self, config):
        super().__init__(config)
        self.width = config.num_key_value_heads * config.head_dim
        self.num_layers, self.head_dim = config.num_hidden_layers, config.head_dim
        self.eps, self.std = config.rms_norm_eps, config.initializer_range
        self.mlp_kv = nn.Parameter(torch.empty(self.projected_layers(config), 2 * self.width, config.hidden_size))
        self.attend_with = MODA_IMPLS[config.moda_impl]

    def switch(self, name, value):
        self.attend_with = MODA_IMPLS[value]  # name: moda_impl

    def reset_parameters(self):
        init.normal_(self.mlp_kv, std=self.std)

    def acts_at(self, step):
        return False  # keys and values are not changed before sequence attention: the depth part joins it

    def mlp_input(self, step, hidden, states):
        """The MLP slot of `step`: a key and a value projected from its MLP's normed input (B, T, D)."""
        if not self.keeps_state(step):
            return
        B, T, _ = hidden.shape
        kv = nn.functional.linear(hidden, self.mlp_kv[step % self.num_layers].to(hidden.dtype))  # (B, T, 2 Hkv d)
        key, value = kv.view(B, T, 2, -1, self.head_dim).unbind(2)  # (B, T, Hkv, d) each
        key = rms_normalize(key, self.eps).to(hidden.dtype)
        states.more[MLP_SLOT, step] = (key.transpose(1, 2), value.transpose(1, 2))  # (B, Hkv, T, d)

    def attend(self, attention_fn, module, query, key, value, mask, step, states, position_embeddings, **kwargs):
        if "cu_seq_lens_q" in kwargs:  # packed sequences: continuous batching's paged attention, flash varlen
            raise ValueError(self.packed_refusal)
        if mask is not None and not isinstance(mask, torch.Tensor):  # flex attention's BlockMask
            raise ValueError("MoDA's depth keys join the attention's softmax in a kernel of its own, which takes a "
                             "tensor mask, not flex attention's block mask: use attn_implementation 'sdpa' or 'eager'")
        if step == 0:
            return attention_fn(module, query, key, value, mask, **kwargs)
        keys, values = [], []
        for j in range(step):  # the attention slot (rotated already), then the MLP slot, of each earlier step
            mlp_key, mlp_value = states.more[MLP_SLOT, j]
            keys += [states[j].score_key, apply_rotary(mlp_key, *position_embeddings)]
            values += [states[j].value, mlp_value]
        depth_key, depth_value = torch.stack(keys, dim=3), torch.stack(values, dim=3)  # (B, Hkv, T, 2 step, d)
        # the eager path (which output_attentions takes) gets the reference: its weights, one entry per layer (the
        # merged form has none, and a layer without weights drops out of `attentions`)
        attend = MODA_IMPLS["reference"] if attention_fn is eager_attention_forward else self.attend_with
        return attend(query, key, value, depth_key, depth_value, mask, kwargs["scaling"])
