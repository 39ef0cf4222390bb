"""DepthAttentionConfig: the Qwen3 fields under their Qwen3 names, plus the cross-layer switch."""

from __future__ import annotations

import copy
import difflib
import math

from transformers import GenerationConfig, PreTrainedConfig

# the names `cross_layer` accepts; `depthattn.methods.register` adds one
CROSS_LAYER_METHODS = ["none", "depth_attention", "value_residual", "denseformer", "attnres", "mhc", "hyper_connections"]
DEPTH_MIX_RULES = ("softmax", "uniform")
DEPTH_MIX_STATES = ("v", "kv", "k")
# the cross-layer method's fields; every other field of DepthAttentionConfig describes the backbone
CROSS_LAYER_FIELDS = (
    "cross_layer", "depth_stride", "depth_window", "depth_mix", "depth_mix_states", "depth_score_bias",
    "depth_self_bias_init", "depth_impl", "denseformer_dilation", "denseformer_period", "attnres_block_size",
    "mhc_streams", "mhc_sinkhorn_iters", "mhc_alpha_init", "hc_streams",
)

# Keyword arguments that PreTrainedConfig itself consumes (legacy names, loading bookkeeping).
_HF_INIT_KWARGS = {
    "torch_dtype", "num_labels", "name_or_path", "output_attentions", "attn_implementation",
    "experts_implementation", "per_layer_config", "rope_scaling", "partial_rotary_factor",
    "model_type", "use_return_dict", "layer_types",
}


class DepthAttentionConfig(PreTrainedConfig):
    r"""Configuration of a Qwen3-style decoder with an optional cross-layer method.

    Qwen3 fields keep their Qwen3 names and meaning. Backbone switches (defaults: Qwen3's) that let Llama,
    Mistral and Qwen2 checkpoints convert without loss (`depthattn.convert`), under transformers' names:

    attention_bias (`bool`, defaults to `False`):
        Biases on q, k, v and o projections (Llama, Qwen3).
    qkv_bias (`bool`, defaults to `False`):
        Biases on the q, k and v projections only, none on o (Qwen2).
    mlp_bias (`bool`, defaults to `False`):
        Biases on the MLP projections (Llama).
    use_qk_norm (`bool`, defaults to `True`):
        An RMSNorm on each query and key head (Qwen3); off for Llama, Mistral and Qwen2.
    k_norm_after_rope (`bool`, defaults to `False`):
        Apply the key RMSNorm after the rotation instead of before it, as the Depth-Attention reference
        implementation does (docs/method.md#the-reference-implementations-checkpoints). Depth scores always use
        the key that sequence attention uses.
    use_sliding_window, sliding_window, max_window_layers (defaults `False`, `None`, 0):
        With `use_sliding_window`, layers from `max_window_layers` on attend to the last `sliding_window` tokens
        only (Qwen2's rule; Mistral is `max_window_layers=0`), and their cache slots keep only that window.
        `layer_types` follows from these three.

    Cross-layer fields:

    cross_layer (`str`, defaults to `"depth_attention"`):
        `"none"` for a vanilla decoder, `"depth_attention"` for Depth-Attention, or a baseline (docs/method.md#baselines,
        one module each in `depthattn.methods`): `"value_residual"`, `"denseformer"`, `"attnres"`, `"mhc"`,
        `"hyper_connections"`.
    depth_stride (`int` or `None`):
        Unrolled steps `j` with `j % depth_stride == 0` are depth sources; `None` means half the unrolled depth,
        `max(1, num_hidden_layers * num_loops // 2)`.
    depth_window (`int`, defaults to 0):
        The `depth_window` unrolled steps directly below each step are sources too.
    depth_mix (`str`, defaults to `"softmax"`):
        `"softmax"` over depth scores, or `"uniform"` (the plain average over the same sources).
    depth_mix_states (`str`, defaults to `"v"`):
        What is mixed and cached in place of the layer's own state: `"v"`, `"kv"` or `"k"`.
        Depth scores always compare the query with each source layer's own key.
    depth_score_bias (`bool`, defaults to `False`):
        A learned bias per layer and per source (self included) added to the depth scores before the softmax,
        initialised to zero, so the model starts as plain Depth-Attention. With `depth_mix="uniform"` the
        weights are the softmax of the bias alone: a learned mix that ignores the tokens.
    depth_self_bias_init (`float`, defaults to 0.0):
        With `depth_score_bias`, the initial bias of each layer's own entry (the sources' start at zero). A large
        value (e.g. 30) starts a model converted from a vanilla one as that vanilla model: each source's weight is
        then at most exp(its score - the layer's own score - 30) (docs/method.md#retrofitting).
    depth_impl (`str`, defaults to `"auto"`):
        How depth mixing is computed, with the same results (`depthattn.ops.DEPTH_IMPLS`): `"reference"` (`naive.py`),
        `"compiled"` (a few torch ops that `torch.compile` fuses), `"triton"` (GPU kernels), or `"auto"`.
    num_loops (`int`, defaults to 1):
        Looped Transformer: the stack of layers runs `num_loops` times with shared weights. Unrolled step
        `u = loop * num_hidden_layers + layer` has its own KV-cache slot `u`, and depth sources (and every
        baseline's per-sublayer parameters) are counted over the unrolled depth.
    denseformer_dilation, denseformer_period (`int`, default 1 each):
        DenseFormer: after block `i` (1-based, every `period`-th block only) average block outputs `m` with
        `(i - m) % dilation == 0`.
    attnres_block_size (`int`, defaults to 12):
        Block Attention Residuals: sublayers (attention and MLP count one each) per block.
    mhc_streams, mhc_sinkhorn_iters, mhc_alpha_init (defaults 4, 20, 0.01):
        mHC: residual streams, Sinkhorn-Knopp iterations, initial value of the three gating scales.
    hc_streams (`int`, defaults to 4):
        Dynamic hyper-connections: residual streams (the expansion rate n).
    """

    model_type = "depth_attention"
    keys_to_ignore_at_inference = ["cache"]

    vocab_size: int = 50304
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 4096
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-5
    use_cache: bool = True
    tie_word_embeddings: bool = False
    rope_theta: float = 1_000_000.0
    rope_parameters: dict | None = None
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    use_qk_norm: bool = True
    k_norm_after_rope: bool = False
    use_sliding_window: bool = False
    sliding_window: int | None = None
    max_window_layers: int = 0
    attention_dropout: float = 0.0
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    cross_layer: str = "depth_attention"
    depth_stride: int | None = None
    depth_window: int = 0
    depth_mix: str = "softmax"
    depth_mix_states: str = "v"
    depth_score_bias: bool = False
    depth_self_bias_init: float = 0.0
    depth_impl: str = "auto"
    num_loops: int = 1
    denseformer_dilation: int = 1
    denseformer_period: int = 1
    attnres_block_size: int = 12
    mhc_streams: int = 4
    mhc_sinkhorn_iters: int = 20
    mhc_alpha_init: float = 0.01
    hc_streams: int = 4

    def __post_init__(self, **kwargs):
        _reject_unknown_keys(self, kwargs)
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and isinstance(self.num_attention_heads, int) and self.num_attention_heads > 0:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"head_dim is not set and hidden_size ({self.hidden_size}) is not divisible by "
                    f"num_attention_heads ({self.num_attention_heads}); set head_dim explicitly or change either"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        kwargs.pop("layer_types", None)  # derived from the sliding-window fields
        self.layer_types = ["sliding_attention" if self.use_sliding_window and i >= self.max_window_layers
                            else "full_attention" for i in range(self.num_hidden_layers)]
        super().__post_init__(**kwargs)
        self.rope_theta = self.rope_parameters.get("rope_theta", self.rope_theta)
        self._check()

    @property
    def unrolled_depth(self) -> int:
        """Decoder layers run per token: `num_hidden_layers * num_loops`."""
        return self.num_hidden_layers * self.num_loops

    def backbone_settings(self) -> dict:
        """The fields that describe the decoder (its loops included) without its cross-layer method."""
        return {name: getattr(self, name) for name in DepthAttentionConfig.__annotations__
                if name not in CROSS_LAYER_FIELDS}

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The decoder as the caches see it. Every cache transformers builds from a config (the dynamic and static
        caches of `generate`, the paged cache of continuous batching) reads it here; a looped model gets a copy with
        one layer per unrolled step, so that each step has its own KV slot (`modeling.py`) of its layer's kind."""
        config = super().get_text_config(decoder=decoder, encoder=encoder)
        if self.num_loops == 1:
            return config
        unrolled = copy.copy(config)
        unrolled.num_hidden_layers, unrolled.num_loops = self.unrolled_depth, 1
        unrolled.layer_types = [self.layer_types[u % self.num_hidden_layers] for u in range(self.unrolled_depth)]
        return unrolled

    @property
    def resolved_depth_stride(self) -> int:
        return self.depth_stride if self.depth_stride is not None else max(1, self.unrolled_depth // 2)

    def _check(self):
        positive = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_key_value_heads "
                f"({self.num_key_value_heads}); pick num_key_value_heads among its divisors"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        check_choice("cross_layer", self.cross_layer, CROSS_LAYER_METHODS)
        check_choice("depth_mix", self.depth_mix, DEPTH_MIX_RULES)
        check_choice("depth_mix_states", self.depth_mix_states, DEPTH_MIX_STATES)
        stride = self.depth_stride
        if stride is not None and (not isinstance(stride, int) or isinstance(stride, bool) or stride < 1):
            raise ValueError(
                f"depth_stride must be an integer >= 1 or None (None means half the unrolled depth), "
                f"got {self.depth_stride!r}"
            )
        if not isinstance(self.depth_score_bias, bool):
            raise ValueError(f"depth_score_bias must be true or false, got {self.depth_score_bias!r}")
        if self.depth_score_bias and self.depth_impl == "triton":
            raise ValueError("depth_score_bias is not in the Triton kernels; use depth_impl 'auto' or 'compiled'")
        bias_init = self.depth_self_bias_init
        if not isinstance(bias_init, (int, float)) or isinstance(bias_init, bool) or not math.isfinite(bias_init):
            raise ValueError(f"depth_self_bias_init must be a finite number, got {bias_init!r}")
        if bias_init and not self.depth_score_bias:
            raise ValueError("depth_self_bias_init initialises the learned score bias; set depth_score_bias=True too")
        for name in ("attention_bias", "qkv_bias", "mlp_bias", "use_qk_norm", "k_norm_after_rope", "use_sliding_window"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        window = self.sliding_window
        if self.use_sliding_window and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ValueError(f"use_sliding_window needs sliding_window, a number of tokens >= 1; got {window!r}")
        if not self.use_sliding_window and window is not None:
            raise ValueError(f"sliding_window={window} has no effect without use_sliding_window=True; set it "
                             "(Mistral: max_window_layers=0, every layer slides) or drop sliding_window")
        if not isinstance(self.max_window_layers, int) or isinstance(self.max_window_layers, bool) \
                or self.max_window_layers < 0:
            raise ValueError(f"max_window_layers must be an integer >= 0, got {self.max_window_layers!r}")
        if not isinstance(self.depth_window, int) or isinstance(self.depth_window, bool) or self.depth_window < 0:
            raise ValueError(f"depth_window must be an integer >= 0, got {self.depth_window!r}")
        for name, low in (("num_loops", 1), ("denseformer_dilation", 1), ("denseformer_period", 1),
                          ("attnres_block_size", 1), ("mhc_streams", 2), ("mhc_sinkhorn_iters", 1),
                          ("hc_streams", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        alpha = self.mhc_alpha_init
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha < float("inf"):
            raise ValueError(f"mhc_alpha_init must be a finite number >= 0, got {alpha!r}")


def check_choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _reject_unknown_keys(config: PreTrainedConfig, kwargs: dict):
    generation_keys = set(GenerationConfig._get_default_generation_params())
    unknown = [k for k in kwargs if not k.startswith("_") and k not in _HF_INIT_KWARGS | generation_keys]
    if unknown:
        known = list(config.__dataclass_fields__)
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, 1)) else repr(k)
                 for k in unknown]
        raise ValueError(f"unknown {type(config).__name__} keys: {', '.join(hints)}")
