"""Mixture-of-Depths Attention, MoDA (Zhu et al., arXiv 2603.15619, 2026; public code github.com/hustvl/MoDA).

Each attention head attends, in one softmax, over the causal sequence keys and values of its own layer and over
the depth keys and values of the same token at every earlier layer (ops/moda). Every unrolled step `u` writes two
depth slots for the steps above it: its attention's own key and value, and a key and value projected from its MLP's
input (a new linear projection per layer, `Hkv * head_dim` wide for each). So step `u` reads `2 u` depth slots.
Depth-Attention instead mixes a few earlier layers' values into the value before sequence attention and caches the
mix; MoDA caches nothing new (docs/method.md#moda).

Choices where the paper's backbone differs from ours (Qwen3: pre-norm, q/k-norm, RoPE) or the public code is one
of several readings:
- Depth keys are compared with the query as the writing layer's own sequence attention compares its keys: the
  attention slot is that layer's key after its k-norm, and the MLP slot's key is RMS-normalised per head (no gain;
  the query's gain scales both). Every depth key is rotated at its token's own position, as the query is, so a
  depth score is the dot product of the un-rotated vectors and does not depend on the position. (The public code
  normalises depth keys with the reading layer's k-norm and leaves them un-rotated against a rotated query.)
- The MLP slot projects the MLP's normed input (`post_attention_layernorm(x)`), the "FFN input" of the paper's
  figure in our pre-norm block; the public code's blocks are post-norm.
- GQA: depth keys and values have the KV heads' layout; a query head reads its KV head's, as in sequence attention.

Parameters: per layer whose MLP slot is read (all but the last when `num_loops` is 1), a `(2 Hkv d, D)` projection.
Initialisation: normal, std `initializer_range`, as the backbone's linear layers (the public code: N(0, 0.02)).
Inference state: none beyond vanilla's KV cache (it caches the plain key and value; past tokens' depth slots are
never read). While a token is processed: the key and value of every earlier step's two slots.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init

from ..config import ConfigField
from ..ops.moda import MODA_IMPLS
from ..ops.rotary import apply_rotary
from .base import AttentionMixer, FlopTerm, rms_normalize

MLP_SLOT = "moda_mlp"  # the key of the MLP slots in the forward pass's states


class MoDA(AttentionMixer):
    config_fields = {
        "moda_impl": ConfigField("reference", (
            'How the combined softmax is computed, same results: "reference" (written out) or "merged" (the sequence '
            "part in scaled_dot_product_attention, the depth part as one extra key per query).")),
    }
    inference_state = (
        "Across tokens: none; the KV cache holds the plain keys and values, vanilla's size. Per token while it is "
        "processed: the key and value of each earlier step's attention and MLP slots (2 x 2 x Hkv x head_dim each)."
    )

    packed_refusal = ("MoDA's depth keys join the attention's softmax, which packed-sequence attention (continuous "
                      "batching, flash varlen) cannot take: run it without continuous batching")
    vllm_refusal = ("its depth keys and values join each attention's softmax beside the cached sequence, which "
                    "vLLM's paged-attention kernels cannot take")
    switchable_fields = ("moda_impl",)
    switch_values = {"moda_impl": tuple(MODA_IMPLS)}
    checked_variants = {"merged": {"moda_impl": "merged"}}

    @classmethod
    def check_tensor_parallel(cls, config, ranks: int):
        if ranks > 1:
            raise ValueError("MoDA's MLP-slot projections give every KV head's depth keys and values, not split "
                             "across tensor-parallel ranks; run it with tensor_parallel_size=1")

    @classmethod
    def check_config(cls, config):
        if config.moda_impl not in MODA_IMPLS:
            raise ValueError(f"moda_impl must be one of {', '.join(map(repr, MODA_IMPLS))}; got {config.moda_impl!r}")

    @staticmethod
    def step_sources(config):
        return [list(range(u)) for u in range(config.unrolled_depth)]

    @staticmethod
    def projected_layers(config) -> int:
        """Layers whose MLP slot a later step reads: all, but the last when the stack runs once."""
        return config.num_hidden_layers - (config.num_loops == 1)

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
        if step == 0:
            return attention_fn(module, query, key, value, mask, **kwargs)
        keys, values = [], []
        for j in range(step):  # the attention slot (rotated already), then the MLP slot, of each earlier step
            mlp_key, mlp_value = states.more[MLP_SLOT, j]
            keys += [states[j].score_key, apply_rotary(mlp_key, *position_embeddings)]
            values += [states[j].value, mlp_value]
        depth_key, depth_value = torch.stack(keys, dim=3), torch.stack(values, dim=3)  # (B, Hkv, T, 2 step, d)
        return self.attend_with(query, key, value, depth_key, depth_value, mask, kwargs.get("scaling"))

    @classmethod
    def extra_parameters(cls, config):
        return cls.projected_layers(config) * 2 * config.num_key_value_heads * config.head_dim * config.hidden_size

    @classmethod
    def flop_terms(cls, config):
        L, D = config.unrolled_depth, config.hidden_size
        d_kv, d_q = config.num_key_value_heads * config.head_dim, config.num_attention_heads * config.head_dim
        slots = sum(2 * u for u in range(L))  # depth slots read, over all steps
        return [
            FlopTerm("MLP-slot key and value projections", 2 * 2 * d_kv * D * max(L - 1, 0), "matmul"),
            FlopTerm("depth scores, every query head against its token's depth keys", 2 * d_q * slots, "matmul",
                     role="weights"),
            FlopTerm("depth values mixed by the combined softmax", 2 * d_q * slots, "matmul"),
        ]

    @classmethod
    def io_elements(cls, config):
        # per step u: read the 2u slots' keys and values; the MLP slots are written once each
        L, d_kv = config.unrolled_depth, config.num_key_value_heads * config.head_dim
        return {"read": sum(2 * 2 * u * d_kv for u in range(L)), "write": 2 * max(L - 1, 0) * d_kv}

    @classmethod
    def extra_state_elements(cls, config, context):
        # during a prefill every step's MLP slot (key and value) for every token, the attention slots being the cache's
        L, d_kv = config.unrolled_depth, config.num_key_value_heads * config.head_dim
        return 2 * max(L - 1, 0) * d_kv * context
