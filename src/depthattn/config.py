"""DepthAttentionConfig: the Qwen3 fields under their Qwen3 names, the cross-layer switch, and the fields of every
registered cross-layer method, each declared and checked by its method's description (`depthattn.methods.descriptions`,
which import no torch: this module imports neither the methods' modules nor the model)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

from transformers import PreTrainedConfig

from .compat_light import CACHE_NAME, config_generation_keys
from .field_checks import check_bool, check_choice, check_int, check_number, did_you_mean
from .methods import DESCRIPTIONS, ENTRY_POINT_GROUP, ConfigField, reserve_fields

__all__ = ["ConfigField", "DepthAttentionConfig", "RENAMED_METHODS", "check_bool", "check_choice", "check_int",
           "check_number", "did_you_mean", "method_fields", "missing_method"]

# Called before each config is built or unpickled: `import depthattn` adds the import of `depthattn.modeling`, which
# registers the models with transformers' Auto classes (every Auto model lookup starts from a config). This module
# imports no model code, so `import depthattn` stays light (`depthattn --help`).
BEFORE_EACH_CONFIG: list[Callable[[], None]] = []


def method_fields() -> dict[str, ConfigField]:
    """The config fields of every registered method, from their descriptions."""
    return {name: field for described in DESCRIPTIONS.values() for name, field in described.config_fields.items()}


def _before_config():
    for hook in BEFORE_EACH_CONFIG:
        hook()


# Keys that transformers' configs and generation take (legacy names, loading bookkeeping): never a typo of ours.
_TRANSFORMERS_KEYS = {
    "torch_dtype", "num_labels", "name_or_path", "output_attentions", "attn_implementation",
    "experts_implementation", "per_layer_config", "rope_scaling", "partial_rotary_factor",
    "model_type", "use_return_dict", "layer_types",
    *vars(PreTrainedConfig()), *config_generation_keys(),
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

    The looped Transformer:

    num_loops (`int`, defaults to 1):
        The stack of layers runs `num_loops` times with shared weights. Unrolled step
        `u = loop * num_hidden_layers + layer` has its own KV-cache slot `u`, and depth sources (and every
        baseline's per-sublayer parameters) are counted over the unrolled depth.

    The cross-layer switch:

    cross_layer (`str`, defaults to `"depth_attention"`):
        `"vanilla"` for the plain decoder (configs saved with its old name, `"none"`, load as it), `"depth_attention"`
        for Depth-Attention, or another method
        (docs/method.md#baselines, one module each in `depthattn.methods`): `"value_residual"`,
        `"value_embeddings"`, `"denseformer"`, `"attnres"`, `"mhc"`, `"hyper_connections"`, `"mudd"`.

    Every registered method's own fields (`depth_*` for Depth-Attention, `denseformer_*`, `attnres_block_size`,
    `mhc_*`, `hc_streams`) are fields of every config too, saved and loaded like the others; each method declares
    them, with their defaults and meaning, in its description's `config_fields` and checks them in `check_config`.
    """

    model_type = "depth_attention"
    keys_to_ignore_at_inference = [CACHE_NAME]
    # tensor parallelism by heads as Qwen3's (`from_pretrained(..., tp_plan="auto")` under torchrun): depth mixing
    # works within each KV-head group, so it shards with the heads; a method's own parameters are replicated
    base_model_tp_plan = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.q_norm": "replicated_with_grad_allreduce",
        "layers.*.self_attn.k_norm": "replicated_with_grad_allreduce",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }
    base_model_pp_plan = {
        "embed_tokens": (["input_ids"], ["inputs_embeds"]),
        "layers": (["hidden_states", "attention_mask"], ["hidden_states"]),
        "norm": (["hidden_states"], ["hidden_states"]),
    }

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

    num_loops: int = 1
    cross_layer: str = "depth_attention"

    def __post_init__(self, **kwargs):
        _before_config()
        fields = method_fields()
        for name, field in fields.items():  # plain attributes, which config.json holds like the dataclass fields
            setattr(self, name, kwargs.pop(name, field.default))
        _reject_typos(kwargs, [*self.__dataclass_fields__, *fields])
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and all(isinstance(getattr(self, name), int) and getattr(self, name) > 0
                                         for name in ("hidden_size", "num_attention_heads")):
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"head_dim is not set and hidden_size ({self.hidden_size}) is not divisible by "
                    f"num_attention_heads ({self.num_attention_heads}); set head_dim explicitly or change either"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        self._check_sizes()  # before anything is derived from them
        kwargs.pop("layer_types", None)  # derived from the sliding-window fields
        self.layer_types = ["sliding_attention" if self.use_sliding_window and i >= self.max_window_layers
                            else "full_attention" for i in range(self.num_hidden_layers)]
        super().__post_init__(**kwargs)
        assert self.rope_parameters is not None  # transformers' __post_init__ makes it a dict
        self.rope_theta = self.rope_parameters.get("rope_theta", self.rope_theta)
        self.validate()

    def __setstate__(self, state):  # a config unpickled in a worker process
        _before_config()
        self.__dict__.update(state)

    def validate(self):
        """Check every field, whatever set it: the constructor, `from_pretrained` keywords (transformers sets them on
        the built config), `config.x = ...` or `config.update(...)`. Building a model calls it
        (`depthattn.methods.build_method`). An old name is mapped to the current one, with a warning."""
        for old, new in RENAMED_METHODS.items():
            if self.cross_layer == old:
                warnings.warn(f'cross_layer="{old}" is the old name of "{new}"; it is read as "{new}"', FutureWarning,
                              stacklevel=2)
                self.cross_layer = new
        self._check()

    @property
    def unrolled_depth(self) -> int:
        """Decoder layers run per token: `num_hidden_layers * num_loops`."""
        return self.num_hidden_layers * self.num_loops

    def backbone_settings(self) -> dict:
        """The fields that describe the decoder (its loops included) without its cross-layer method."""
        return {name: getattr(self, name) for name in DepthAttentionConfig.__annotations__ if name != "cross_layer"}

    def cross_layer_settings(self) -> dict:
        """The fields that `backbone_settings` leaves out: `cross_layer` and every registered method's fields."""
        return {name: getattr(self, name) for name in ("cross_layer", *method_fields())}

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

    def _check_sizes(self):
        positive = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        eps: object = self.rms_norm_eps  # whatever config.json held
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"rms_norm_eps must be a number > 0, got {eps!r}")

    def _check(self):
        self._check_sizes()
        assert self.num_key_value_heads is not None and self.head_dim is not None  # checked just above
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_key_value_heads "
                f"({self.num_key_value_heads}); pick num_key_value_heads among its divisors"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        partial = (self.rope_parameters or {}).get("partial_rotary_factor", 1.0)
        if partial != 1:  # transformers' Llama and vLLM would rotate a part; this model rotates the whole head
            raise ValueError(f"partial_rotary_factor {partial!r} is not supported: every dimension of a head is "
                             "rotated here; leave it out (or 1.0)")
        switches = ("attention_bias", "qkv_bias", "mlp_bias", "use_qk_norm", "k_norm_after_rope", "use_sliding_window")
        for name in switches:
            check_bool(name, getattr(self, name))
        window = self.sliding_window
        if self.use_sliding_window and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ValueError(f"use_sliding_window needs sliding_window, a number of tokens >= 1; got {window!r}")
        check_int("max_window_layers", self.max_window_layers, 0)
        check_int("num_loops", self.num_loops, 1)
        method: object = self.cross_layer  # whatever was set, a str or not
        if isinstance(method, str) and method not in DESCRIPTIONS:
            raise ValueError(f"the config names {missing_method(method)}")
        check_choice("cross_layer", self.cross_layer, DESCRIPTIONS)
        for described in DESCRIPTIONS.values():
            described.check_config(self)


reserve_fields(DepthAttentionConfig.__dataclass_fields__)  # no method may declare a backbone field

# old values of `cross_layer` that configs saved by earlier versions hold
RENAMED_METHODS = {"none": "vanilla"}


def missing_method(name: str) -> str:
    """`cross_layer=name`, which no registered method has, and how to get that method: the config's own check and
    the commands (loading.py, which name the folder) say it alike."""
    installed, hint = ", ".join(map(repr, DESCRIPTIONS)), did_you_mean(name, DESCRIPTIONS)
    return (f"cross_layer={name!r}, a method not installed here (installed: {installed}){hint}: install the package "
            f"that provides it (it registers the method through an entry point of the group {ENTRY_POINT_GROUP!r}, "
            "docs/methods.md), or register it with depthattn.methods.register before loading the folder or building "
            "the config")


def _reject_typos(kwargs: dict, known: list[str]):
    """Refuse a key one or two edits away from a field (`depth_stirde`, `hiden_size`): a typo would otherwise be
    stored as an extra attribute and the field keep its default. Any other key is kept, as transformers'
    configs keep attributes that tools and training code add."""
    typos = {}
    for key in kwargs:
        if key.startswith("_") or len(key) < 6 or key in _TRANSFORMERS_KEYS:
            continue
        distance, field = min((_edits(key.lower(), field), field) for field in known)
        if 0 < distance <= 2:
            typos[key] = field
    if typos:
        hints = ", ".join(f"{key!r} (did you mean {field!r}?)" for key, field in typos.items())
        raise ValueError(f"DepthAttentionConfig keys that look like typos of its fields: {hints}")


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours."""
    if abs(len(a) - len(b)) > 2:
        return 3  # far enough: nothing below cares about the exact number
    rows = [list(range(len(b) + 1))]
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            row.append(min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (x != y)))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]
