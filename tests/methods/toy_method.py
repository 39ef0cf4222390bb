"""A toy cross-layer method added in one file plus one registry line: every step u >= 1 adds a learned multiple of
step 0's value to its own, `V'_u = V_u + g_u V_0`, inside attention through the `AttentionMixer` hooks.

Not a paper's method: no arXiv reference. Parameters: `L - 1` gains `g_u`, in a submodule (one row of an
nn.Embedding per step, which transformers would draw from a normal distribution: `reset_parameters` must reach it).
Initialisation: `toy_gain_init`, its own config field (0: vanilla at init).
"""

from torch import nn
from transformers import initialization as init

from depthattn.config import ConfigField, check_number
from depthattn.methods import AttentionMixer, FlopTerm


class ToyValueGain(AttentionMixer):
    inference_state = "Across tokens: none. Per token while it is processed: layer 0's value."
    config_fields = {"toy_gain_init": ConfigField(0.0, "The initial value of every gain g_u.")}

    @classmethod
    def check_config(cls, config):
        check_number("toy_gain_init", config.toy_gain_init)

    def __init__(self, config):
        super().__init__(config)
        self.gains = nn.Embedding(max(config.unrolled_depth - 1, 0), 1)  # (L - 1, 1)
        self.gain_init = config.toy_gain_init

    def reset_parameters(self):
        init.constant_(self.gains.weight, self.gain_init)

    @staticmethod
    def step_sources(config):
        return [[0] if u else [] for u in range(config.unrolled_depth)]

    def forward(self, attention, query, state, step, states):
        gain = self.gains.weight[step - 1].to(state.value.dtype)
        return state._replace(value=state.value + gain * states[0].value), None

    @classmethod
    def extra_parameters(cls, config):
        return max(config.unrolled_depth - 1, 0)

    @classmethod
    def flop_terms(cls, config):
        d_kv = config.num_key_value_heads * config.head_dim
        return [FlopTerm("value gain V_u + g_u V_0", 2 * d_kv * max(config.unrolled_depth - 1, 0), "elementwise")]

    @classmethod
    def io_elements(cls, config):
        d_kv = config.num_key_value_heads * config.head_dim
        return {"read": 2 * d_kv * max(config.unrolled_depth - 1, 0), "write": d_kv * max(config.unrolled_depth - 1, 0)}

    @classmethod
    def extra_state_elements(cls, config, context):
        return 0  # V_0 of every position is what KV-cache slot 0 holds
