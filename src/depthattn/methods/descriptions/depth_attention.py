"""Depth-Attention (Zeng, Hao et al., arXiv 2606.05014; docs/method.md#depth-attention), described: its config
fields `depth_*`, its variants, its source rule (`depth_sources`) and its costs; the module: methods/depth_attention.py.

Before sequence attention, step `u`'s query attends over the keys of its sources S(u) (earlier unrolled steps,
`depth_sources`) at the same position and mixes their (already mixed) values into its own
(`depthattn.ops.depth_mix`; the reference is `ops/depth_mix/naive.py`).

Parameters: none; the layer's own q, k, v are reused. With `depth_score_bias` (a learned score bias) or
`depth_mix="linear"` (learned weights), one learned value per unrolled step with sources and per candidate, one
after the other in `model.cross_layer.learned_mix`.
Inference state (docs/method.md#inference): the KV cache keeps vanilla's size, mixed values in the value slots.
"""

from __future__ import annotations

from ...field_checks import check_bool, check_choice, check_int, check_number
from .base import AttentionMixerDescription, ConfigField, FlopTerm

DEPTH_MIX_RULES = ("softmax", "uniform", "linear")
DEPTH_MIX_STATES = ("v", "kv", "k")
DEPTH_IMPL_NAMES = ("auto", "reference", "compiled", "triton", "cpu")  # depthattn.ops.DEPTH_IMPLS


def _half(depth: int) -> int:
    return max(1, depth // 2)


def depth_sources(layer_idx: int, stride: int, window: int = 0) -> list[int]:
    """Earlier layers that layer `layer_idx` mixes from: multiples of `stride` and the `window` layers below it."""
    if stride <= 1:
        return list(range(layer_idx))
    return [j for j in range(layer_idx) if j % stride == 0 or j >= layer_idx - window]


def resolved_depth_stride(config) -> int:
    """`depth_stride` with `None` resolved: half the unrolled depth."""
    return config.depth_stride if config.depth_stride is not None else _half(config.unrolled_depth)


class DepthAttentionDescription(AttentionMixerDescription):
    module = "depthattn.methods.depth_attention:DepthAttention"
    config_fields = {
        "depth_stride": ConfigField(None, (
            "Unrolled steps `j` with `j % depth_stride == 0` are depth sources; `None` means half the unrolled depth, "
            "`max(1, num_hidden_layers * num_loops // 2)` (`resolved_depth_stride`).")),
        "depth_window": ConfigField(0, "The `depth_window` unrolled steps directly below each step are sources too."),
        "depth_mix": ConfigField("softmax", (
            '`"softmax"` over depth scores, `"uniform"` (the plain average over the same sources), or `"linear"`: '
            "learned weights per step and candidate that ignore the tokens and need not sum to one (as value "
            "residual's), starting at the plain average.")),
        "depth_mix_states": ConfigField("v", (
            'What is mixed and cached in place of the layer\'s own state: `"v"`, `"kv"` or `"k"`. Depth scores '
            "always compare the query with each source layer's own key.")),
        "depth_score_bias": ConfigField(False, (
            "A learned bias per layer and per source (self included) added to the depth scores before the softmax, "
            "initialised to zero, so the model starts as plain Depth-Attention. With `depth_mix=\"uniform\"` the "
            "weights are the softmax of the bias alone: a learned mix that ignores the tokens.")),
        "depth_self_bias_init": ConfigField(0.0, (
            "With `depth_score_bias`, the initial bias of each layer's own entry (the sources' start at zero). A large "
            "value (e.g. 30) starts a model converted from a vanilla one as that vanilla model: each source's weight "
            "is then at most exp(its score - the layer's own score - 30) (docs/method.md#retrofitting).")),
        "depth_impl": ConfigField("auto", (
            "How depth mixing is computed, with the same results (`depthattn.ops.DEPTH_IMPLS`, checked when the "
            'model is built): `"reference"` (`naive.py`), `"compiled"` (a few torch ops that `torch.compile` '
            'fuses), `"triton"` (GPU kernels), `"cpu"` (one C++ op per call for CPU inference, compiled on first use), '
            'or `"auto"`.')),
    }
    # named variants (docs/method.md#variants); a function receives the unrolled depth D
    presets = {
        "depth_attention": {"depth_stride": _half},  # the default: sources every D // 2 steps
        "depth_half": {"depth_stride": _half},
        "depth_first_layer": {"depth_stride": lambda depth: max(1, depth)},  # layer 0 is the only source
        "depth_quarter": {"depth_stride": lambda depth: max(1, depth // 4)},
        "depth_every": {"depth_stride": 1},  # every earlier step is a source
        "depth_uniform": {"depth_stride": _half, "depth_mix": "uniform"},  # the plain average, same sources
        "depth_uniform_every": {"depth_stride": 1, "depth_mix": "uniform"},  # the plain average of every earlier step
        "depth_linear": {"depth_stride": _half, "depth_mix": "linear"},  # learned weights, any sum, same sources
        "depth_linear_every": {"depth_stride": 1, "depth_mix": "linear"},
        "depth_mix_v": {"depth_stride": _half, "depth_mix_states": "v"},
        "depth_mix_kv": {"depth_stride": _half, "depth_mix_states": "kv"},
        "depth_mix_k": {"depth_stride": _half, "depth_mix_states": "k"},
        "depth_bias": {"depth_stride": _half, "depth_score_bias": True},  # a learned score per layer and source
        "depth_static": {"depth_stride": _half, "depth_mix": "uniform", "depth_score_bias": True},  # ignores tokens
        "depth_static_every": {"depth_stride": 1, "depth_mix": "uniform", "depth_score_bias": True},
        # converted from a vanilla model, it starts as that model (docs/method.md#retrofitting)
        "depth_retrofit": {"depth_stride": _half, "depth_score_bias": True, "depth_self_bias_init": 30.0},
        # near that model (a source starts at about exp(-4) of the layer's own weight) and free to leave it
        "depth_retrofit_soft": {"depth_stride": _half, "depth_score_bias": True, "depth_self_bias_init": 4.0},
    }
    inference_state = (
        "Across tokens: none; the KV cache has vanilla's size (mixed values in the value slots). Per token while "
        "it is processed: k and mixed v of its source layers (|S| KV-head vector pairs)."
    )
    switchable_fields = ("depth_impl",)
    switch_values = {"depth_impl": ("reference", "compiled", "auto")}  # "triton" needs a GPU, "cpu" a compiler
    checked_variants = {
        "bias_kv_window": {"depth_score_bias": True, "depth_mix_states": "kv", "depth_stride": 2, "depth_window": 1},
        "static_k_every": {"depth_mix": "uniform", "depth_score_bias": True, "depth_mix_states": "k",
                           "depth_stride": 1},
        "linear_every": {"depth_mix": "linear", "depth_stride": 1},
    }
    maps_depth_weights = True
    depth_map_title = "Depth-Attention weights ({samples} x {seq_len} tokens, stride {depth_stride})"

    @classmethod
    def settings(cls, config):
        return {**super().settings(config), "depth_stride": resolved_depth_stride(config)}

    @classmethod
    def check_tensor_parallel(cls, config, ranks: int):
        if ranks > config.num_key_value_heads:
            raise ValueError(f"tensor_parallel_size={ranks} > num_key_value_heads={config.num_key_value_heads} would "
                             "split the query group that Depth-Attention averages per KV head; take at most one rank "
                             "per KV head")

    @classmethod
    def check_config(cls, config):
        check_choice("depth_mix", config.depth_mix, DEPTH_MIX_RULES)
        check_choice("depth_mix_states", config.depth_mix_states, DEPTH_MIX_STATES)
        check_choice("depth_impl", config.depth_impl, DEPTH_IMPL_NAMES)
        stride = config.depth_stride
        if stride is not None and (not isinstance(stride, int) or isinstance(stride, bool) or stride < 1):
            raise ValueError(f"depth_stride must be an integer >= 1 or None (None means half the unrolled depth), "
                             f"got {stride!r}")
        check_int("depth_window", config.depth_window, 0)
        check_bool("depth_score_bias", config.depth_score_bias)
        if config.depth_score_bias and config.depth_impl == "triton":
            raise ValueError("depth_score_bias is not in the Triton kernels; use depth_impl 'auto' or 'compiled'")
        check_number("depth_self_bias_init", config.depth_self_bias_init)
        if config.depth_self_bias_init and not config.depth_score_bias:
            raise ValueError("depth_self_bias_init initialises the learned score bias; set depth_score_bias=True too")
        if config.depth_mix == "linear" and config.depth_score_bias:
            raise ValueError('depth_mix="linear" learns the weights themselves, so there are no scores to bias; '
                             "set depth_score_bias=False")
        if config.depth_mix == "linear" and config.depth_impl == "triton":
            raise ValueError("the linear mix is not in the Triton kernels; use depth_impl 'auto' or 'compiled'")

    @staticmethod
    def step_sources(config):
        """S(u) for every unrolled step u, chosen over the unrolled depth (docs/method.md#the-operation)."""
        return [depth_sources(u, resolved_depth_stride(config), config.depth_window)
                for u in range(config.unrolled_depth)]

    @classmethod
    def candidates(cls, config) -> int:
        """sum over steps with sources of n = |S(u)| + 1 (sources and itself), all at KV-head resolution."""
        return sum(len(s) + 1 for s in cls.step_sources(config) if s)

    @classmethod
    def extra_parameters(cls, config):
        if not config.depth_score_bias and config.depth_mix != "linear":
            return 0  # Depth-Attention reuses the layer's own q, k, v
        return cls.candidates(config)  # the score bias or linear weights: one per step with sources and candidate

    @classmethod
    def flop_terms(cls, config):
        d_kv = config.num_key_value_heads * config.head_dim
        candidates = cls.candidates(config)
        mixed = len(config.depth_mix_states)  # "v", "k": 1 state mixed; "kv": 2
        terms = [FlopTerm("depth mix: weighted sums of the candidates' states, 2 n d_kv per mixed state",
                          2 * candidates * d_kv * mixed, "elementwise")]
        if config.depth_mix == "softmax":  # uniform weights need no scores
            terms.insert(0, FlopTerm("depth scores: group-mean query . candidate keys, 2 n d_kv",
                                     2 * candidates * d_kv, "elementwise", "weights"))
        return terms

    @classmethod
    def io_elements(cls, config):
        d_kv = config.num_key_value_heads * config.head_dim
        candidates = cls.candidates(config)
        mixed = len(config.depth_mix_states)
        passes = mixed + (config.depth_mix == "softmax")  # the score keys, then each mixed state
        writes = mixed * config.unrolled_depth if candidates else 0  # one mixed state per layer, all L as the paper
        return {"read": passes * candidates * d_kv, "write": writes * d_kv}

    @classmethod
    def extra_state_elements(cls, config, context):
        # source states (k_j, vmix_j at every position) are what KV-cache slot j holds: nothing extra. When keys
        # are mixed, a mixed source j >= 1 also needs its plain key (the score key), not in the cache.
        if "k" not in config.depth_mix_states:
            return 0
        sources = cls.step_sources(config)
        read_later = {j for s in sources for j in s}
        return sum(1 for j in read_later if sources[j]) * context * config.num_key_value_heads * config.head_dim

    @classmethod
    def cost_details(cls, config):
        sources = cls.step_sources(config)
        return {
            "depth_sources_total": sum(len(s) for s in sources),  # sum |S(u)|: 70 at 3B
            "depth_candidates_total": cls.candidates(config),  # sum (|S(u)| + 1): 117 at 3B
        }
