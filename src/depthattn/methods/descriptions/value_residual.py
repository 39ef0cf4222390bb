"""Value residual learning, ResFormer (Zhou et al., arXiv 2410.17897), described: where it runs and its costs; the
module: methods/value_residual.py.

Every unrolled step `u >= 1` mixes the value of step 0 into its own before sequence attention:
`V'_u = lambda_1 V_0 + lambda_2 V_u`, with learned scalars per step (ResFormer's initialisation: 0.5 each).
Like Depth-Attention it acts inside attention, with step 0 as every later step's source, and the mixed value
takes the plain value's KV-cache slot.

Parameters: `2 (L - 1)` scalars (L = unrolled depth). At initialisation it equals Depth-Attention with
`depth_mix="uniform"` and only layer 0 as source (the "depth_first_layer" + "depth_uniform" ablation).
"""

from __future__ import annotations

from .base import AttentionMixerDescription, FlopTerm


class ValueResidualDescription(AttentionMixerDescription):
    module = "depthattn.methods.value_residual:ValueResidual"
    inference_state = (
        "Across tokens: none; the KV cache has vanilla's size (mixed values in the value slots). Per token while "
        "it is processed: layer 0's value, one KV-head vector set (Hkv x head_dim)."
    )

    @staticmethod
    def step_sources(config):
        return [[0] if u else [] for u in range(config.unrolled_depth)]

    @classmethod
    def extra_parameters(cls, config):
        return 2 * max(config.unrolled_depth - 1, 0)  # lambda_1, lambda_2 per step u >= 1

    @classmethod
    def flop_terms(cls, config):
        # V' = lambda_1 V_0 + lambda_2 V: a weighted sum of 2 vectors, 2 * 2 d_kv (the model's ops: 2 mul + 1 add)
        L, d_kv = config.unrolled_depth, config.num_key_value_heads * config.head_dim
        return [FlopTerm("value mix lambda_1 V_0 + lambda_2 V_u, u >= 1", 4 * d_kv * max(L - 1, 0), "elementwise")]

    @classmethod
    def io_elements(cls, config):
        # like Depth-Attention with uniform weights and layer 0 as the only source: read V_0 and V_u, write V'_u
        L, d_kv = config.unrolled_depth, config.num_key_value_heads * config.head_dim
        return {"read": 2 * max(L - 1, 0) * d_kv, "write": (L if L > 1 else 0) * d_kv}

    @classmethod
    def extra_state_elements(cls, config, context):
        return 0  # V_0 of every position is what KV-cache slot 0 holds
