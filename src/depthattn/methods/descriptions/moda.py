"""Mixture-of-Depths Attention, MoDA (Zhu et al., arXiv 2603.15619, 2026; public code github.com/hustvl/MoDA),
described: its config field, where it runs and its costs; the module: methods/moda.py.

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
Inference state: none beyond vanilla's KV cache (it caches the plain key and value; past tokens' depth slots are
never read). While a token is processed: the key and value of every earlier step's two slots.
"""

from __future__ import annotations

from ...field_checks import check_choice
from .base import AttentionMixerDescription, ConfigField, FlopTerm

MODA_IMPL_NAMES = ("reference", "merged")  # depthattn.ops.moda.MODA_IMPLS: how the combined softmax is computed


class MoDADescription(AttentionMixerDescription):
    module = "depthattn.methods.moda:MoDA"
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
    switch_values = {"moda_impl": MODA_IMPL_NAMES}
    checked_variants = {"merged": {"moda_impl": "merged"}}

    @classmethod
    def check_tensor_parallel(cls, config, ranks: int):
        if ranks > 1:
            raise ValueError("MoDA's MLP-slot projections give every KV head's depth keys and values, not split "
                             "across tensor-parallel ranks; run it with tensor_parallel_size=1")

    @classmethod
    def check_config(cls, config):
        check_choice("moda_impl", config.moda_impl, MODA_IMPL_NAMES)

    @staticmethod
    def step_sources(config):
        return [list(range(u)) for u in range(config.unrolled_depth)]

    @staticmethod
    def projected_layers(config) -> int:
        """Layers whose MLP slot a later step reads: all, but the last when the stack runs once."""
        return config.num_hidden_layers - (config.num_loops == 1)

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
