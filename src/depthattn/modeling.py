"""A Qwen3-style decoder with Depth-Attention or another cross-layer method, optionally looped.

State-dict keys are those of transformers' Qwen3ForCausalLM; a baseline's parameters (`depthattn.methods`) live
under `model.cross_layer`. With `num_loops` K the stack of layers runs K times with shared weights; unrolled step
`u = loop * num_hidden_layers + layer` has KV-cache slot `u` (caches built from the config have one slot per unrolled
step: `DepthAttentionConfig.get_text_config`), and depth sources are chosen over the unrolled depth.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Unpack, cast

import torch
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .compat import (
    ModelBackports,
    attn_implementation,
    cache_kwarg,
    cache_output,
    output_recorder,
    register_for_transformers_serve,
    slice_logits_to_keep,
    with_attn_implementation,
)
from .config import DepthAttentionConfig
from .convert import decoder_to_depth_attention
from .layer_states import DepthState, DepthStates
from .methods import DESCRIPTIONS, AttentionMixer, CrossLayerMethod, Residual, build_method
from .ops.attention import eager_attention_forward
from .ops.norm import rms_normalize
from .ops.rotary import apply_rotary


@cache_output
@dataclass
class DepthAttentionModelOutput(BaseModelOutputWithPast):
    """`depth_weights`: per unrolled step with depth sources, in order, (B, Hkv, T, |sources| + 1) float32 weights
    with self last (for `output_depth_weights=True`)."""

    depth_weights: tuple[torch.Tensor | None, ...] | None = None


@cache_output
@dataclass
class DepthAttentionCausalLMOutput(CausalLMOutputWithPast):
    depth_weights: tuple[torch.Tensor | None, ...] | None = None


class DepthAttentionRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * rms_normalize(x, self.eps).to(x.dtype)  # as Qwen3: normalised in float32 at least


class DepthAttentionMLP(nn.Module):
    def __init__(self, config: DepthAttentionConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DepthAttentionRotaryEmbedding(nn.Module):
    def __init__(self, config: DepthAttentionConfig):
        super().__init__()
        self.config = config
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        assert config.rope_parameters is not None  # transformers' config __post_init__ makes it a dict
        self.rope_type = config.rope_parameters["rope_type"]
        init_fn = self.compute_default_rope_parameters if self.rope_type == "default" else ROPE_INIT_FUNCTIONS[
            self.rope_type]
        inv_freq, self.attention_scaling = init_fn(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: DepthAttentionConfig, **kwargs) -> tuple[torch.Tensor, float]:
        dim = config.head_dim
        assert config.rope_parameters is not None and dim is not None  # both set by the config's __post_init__
        inv_freq = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, 1.0

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)  # (B, T, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def apply_rotary_pos_emb(q, k, cos, sin):
    return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


class DepthAttentionAttention(nn.Module):
    def __init__(self, config: DepthAttentionConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        assert config.head_dim is not None and config.num_key_value_heads is not None  # the config derives both
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        qkv_bias = config.attention_bias or config.qkv_bias  # Qwen2: q, k, v biases without an o bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size,
                                bias=config.attention_bias)
        self.q_norm: nn.Module
        self.k_norm: nn.Module
        if config.use_qk_norm:
            self.q_norm = DepthAttentionRMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = DepthAttentionRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        else:  # Llama, Mistral, Qwen2
            self.q_norm = self.k_norm = nn.Identity()
        self.k_norm_after_rope = config.k_norm_after_rope
        self.sliding_window = config.sliding_window if config.layer_types[layer_idx] == "sliding_attention" else None
        self.num_layers = config.num_hidden_layers

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        mixer: AttentionMixer | None,
        depth_states: DepthStates,
        loop: int = 0,
        cache: Cache | None = None,
        attn_implementation: str = "sdpa",
        key_value_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`mixer`: the method when it acts inside attention, else None (the plain attention). `key_value_states`:
        own (normed) inputs of the keys and the values (a multiway method); else both read `hidden_states`, as the
        queries do."""
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        key_input, value_input = key_value_states or (hidden_states, hidden_states)
        query = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)  # (B, Hq, T, d)
        key = self.k_proj(key_input).view(hidden_shape)  # (B, T, Hkv, d)
        if not self.k_norm_after_rope:
            key = self.k_norm(key)
        key = key.transpose(1, 2)  # (B, Hkv, T, d)
        value = self.v_proj(value_input).view(hidden_shape).transpose(1, 2)  # (B, Hkv, T, d)
        query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        if self.k_norm_after_rope:  # the reference implementation's order (docs/method.md)
            key = self.k_norm(key)

        step = loop * self.num_layers + self.layer_idx
        if mixer is not None:  # e.g. mixing in earlier steps' states
            state = DepthState(key, key, value)
            if mixer.acts_at(step):
                state, _ = mixer(self, query, state, step, depth_states)
            if mixer.keeps_state(step):
                depth_states[step] = state
            key, value = state.key, state.value
        if cache is not None:  # the mixed state takes the plain state's slot; one slot per unrolled step
            key, value = cache.update(key, value, step, kwargs=kwargs)

        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(attn_implementation, eager_attention_forward)
        options = dict(dropout=self.config.attention_dropout if self.training else 0.0, scaling=self.scaling,
                       sliding_window=self.sliding_window, **kwargs)
        if mixer is None:
            out, attn_weights = attention(self, query, key, value, attention_mask, **options)
        else:
            out, attn_weights = mixer.attend(attention, self, query, key, value, attention_mask, step, depth_states,
                                             position_embeddings, **options)
        return self.o_proj(out.reshape(*input_shape, -1).contiguous()), attn_weights


class DepthAttentionDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: DepthAttentionConfig, layer_idx: int):
        super().__init__()
        self.self_attn = DepthAttentionAttention(config, layer_idx)
        self.mlp = DepthAttentionMLP(config)
        self.input_layernorm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.first_sublayer = 2 * layer_idx

    def forward(self, hidden_states, residual: Residual | None = None, mixer: AttentionMixer | None = None,
                loop: int = 0, **kwargs):
        """`hidden_states` is the residual stream: the plain (B, T, D) tensor, or, given `residual` (the method
        when it owns the stream), that method's own stream, which it reads from and writes to. `mixer`: the method
        when it acts inside attention (methods/base.py)."""
        if residual is not None:
            return self.residual_forward(hidden_states, residual, loop, **kwargs)
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), mixer=mixer, loop=loop,
                                                       **kwargs)[0]
        x = self.post_attention_layernorm(hidden_states)
        if mixer is not None:
            mixer.mlp_input(self.self_attn.layer_idx + loop * self.self_attn.num_layers, x, kwargs["depth_states"])
        return hidden_states + self.mlp(x)

    def residual_forward(self, stream, residual: Residual, loop: int, **kwargs):
        sublayer = self.first_sublayer + 2 * loop * self.self_attn.num_layers
        x = residual.read(stream, sublayer)
        key_value = residual.read_key_value(stream, sublayer)
        if key_value is not None:
            key_value = tuple(self.input_layernorm(t) for t in key_value)
        attn_out, _ = self.self_attn(self.input_layernorm(x), mixer=None, loop=loop, key_value_states=key_value,
                                     **kwargs)
        stream = residual.write(stream, sublayer, attn_out)
        x = self.post_attention_layernorm(residual.read(stream, sublayer + 1))
        return residual.write(stream, sublayer + 1, self.mlp(x))


# the ignore: ModelBackports defines gradient_checkpointing_enable only under releases before 5.23 (compat.py), whose
# PreTrainedModel has that signature; mypy reads the installed release
def check_method_switch(config: DepthAttentionConfig, name: str, value) -> None:
    """That `switch_method_field(name, value)` may switch a model of `config`: a field of its method's
    `switchable_fields`, to a value the method takes with the rest of the config."""
    method = DESCRIPTIONS[config.cross_layer]
    if name not in method.switchable_fields:
        switchable = ", ".join(method.switchable_fields) or "none"
        raise ValueError(f"{name} is not a switchable field of cross_layer={config.cross_layer!r} "
                         f"(switchable: {switchable})")
    switched = copy.copy(config)
    setattr(switched, name, value)
    method.check_config(switched)  # its choices, and combinations it refuses (the Triton kernels have no bias)


class DepthAttentionPreTrainedModel(ModelBackports, PreTrainedModel):  # type: ignore[misc]
    config: DepthAttentionConfig
    config_class = DepthAttentionConfig
    base_model_prefix = "model"
    _no_split_modules = ["DepthAttentionDecoderLayer"]
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {
        "hidden_states": output_recorder(DepthAttentionDecoderLayer, num_hidden_layers_key="unrolled_depth"),
        "attentions": output_recorder(DepthAttentionAttention, index=1),
        "depth_weights": output_recorder(AttentionMixer, index=1),  # steps with sources, in order
    }

    def _activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers=1, offload=False):
        reentrant_safe = DESCRIPTIONS[self.config.cross_layer].reentrant_checkpointing_safe
        if (activation_checkpointing_kwargs or {}).get("use_reentrant") and not reentrant_safe:
            raise ValueError("use_reentrant=True would lose the gradients that reach earlier layers through depth "
                             "mixing and the cross-layer methods (they are not positional tensor inputs of a layer); "
                             "leave use_reentrant at its default, False")
        super()._activation_checkpointing_enable(activation_checkpointing_kwargs, every_n_layers, offload)

    def switch_method_field(self, name: str, value):
        """Set a config field that changes how the cross-layer method computes, not what (its class's
        `switchable_fields`, e.g. Depth-Attention's `depth_impl`), on a built model in place, as
        `set_attn_implementation` switches attention: the weights and the outputs stay the same."""
        check_method_switch(self.config, name, value)
        for module in self.modules():
            if isinstance(module, CrossLayerMethod):
                module.switch(name, value)
        setattr(self.config, name, value)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        # transformers records the new size in get_text_config(), which for a looped model is a copy (config.py)
        self.config.vocab_size = embeddings.num_embeddings
        return embeddings

    def _initialize_weights(self, module, is_custom_code=False):
        # transformers passes over a module of custom code that has no parameter of its own; a method's parameters
        # may all sit in its submodules
        super()._initialize_weights(module, is_custom_code and not isinstance(module, CrossLayerMethod))

    def _init_weights(self, module):
        method = cast(nn.Module, getattr(self, self.base_model_prefix, self).cross_layer)
        if isinstance(module, CrossLayerMethod):
            # the method's documented initialisation of all its parameters, its submodules' too (guarded: loaded
            # values stay), drawn from its own random stream, so that with the same seed the backbone starts from
            # vanilla's weights whatever the method
            devices = [p.device for p in module.parameters() if p.device.type == "cuda"][:1]
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(torch.initial_seed() + 1)
                module.reset_parameters()
        elif not any(module is part for part in method.modules()):
            super()._init_weights(module)


class DepthAttentionModel(DepthAttentionPreTrainedModel):
    def __init__(self, config: DepthAttentionConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DepthAttentionDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = DepthAttentionRotaryEmbedding(config)
        self.cross_layer = build_method(config)  # the method's parameters: none for vanilla and Depth-Attention
        # its family, decided once: the layers call its hooks (methods/base.py), or none for the plain decoder
        self.owns_stream = isinstance(self.cross_layer, Residual)
        self.mixes = isinstance(self.cross_layer, AttentionMixer)
        self.post_init()

    @cache_kwarg
    # the ignore: TransformersKwargs repeats position_ids and the output flags, which this signature names
    def forward(  # type: ignore[misc]
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> DepthAttentionModelOutput | tuple:
        # unset output flags stay unset, so that capture_outputs reads them from the config
        flags = {name: value for name, value in (("output_attentions", output_attentions),
                                                 ("output_hidden_states", output_hidden_states)) if value is not None}
        out = self._forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            cache=cache, inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True,
                            **flags, **kwargs)
        if out.hidden_states is not None and self.owns_stream:  # its streams, seen as (B, T, D); the last is normed
            *streams, last = out.hidden_states
            out.hidden_states = (*map(self.cross_layer.hidden, streams), last)
        return out if (self.config.return_dict if return_dict is None else return_dict) else out.to_tuple()

    @capture_outputs
    def _forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> DepthAttentionModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            assert input_ids is not None  # exactly one of the two, checked above
            inputs_embeds = _embed(self.embed_tokens, input_ids)
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        slots = self.config.unrolled_depth  # one per unrolled step
        if isinstance(cache, Cache) and cache.layer_class_to_replicate is None and len(cache) < slots:
            raise ValueError(f"this cache holds {len(cache)} layer slots; the model needs {slots} "
                             "(num_hidden_layers x num_loops): build it from this model's config, e.g. "
                             "DynamicCache(config=model.config)")
        positions: torch.Tensor
        if position_ids is None:
            past = cache.get_seq_length() if cache is not None else 0
            positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None] + past  # (1, T)
        else:
            positions = position_ids

        # attention weights come from the eager path only, and each path wants its own kind of mask
        configured = attn_implementation(self.config)
        implementation = "eager" if output_attentions else configured
        if isinstance(attention_mask, dict):  # built by `generate` for the configured implementation
            if implementation != configured:
                raise ValueError("output_attentions with a prepared mask needs attn_implementation='eager'")
            masks = attention_mask
        else:
            mask_config: PreTrainedConfig = self.config
            if implementation != configured:
                mask_config = with_attn_implementation(self.config, implementation)
            mask_functions = {"full_attention": create_causal_mask,
                              "sliding_attention": create_sliding_window_causal_mask}
            # positional: the cache's parameter is `cache`, before 5.24 `past_key_values` (compat.CACHE_NAME)
            masks = {kind: mask_functions[kind](mask_config, inputs_embeds, attention_mask, cache, positions)
                     for kind in set(self.config.layer_types)}

        position_embeddings = self.rotary_emb(inputs_embeds, positions)
        residual = self.cross_layer if self.owns_stream else None
        mixer = self.cross_layer if self.mixes else None
        stream = residual.init(inputs_embeds) if residual is not None else inputs_embeds
        # written and read by the attentions; depth weights are computed only when recorded (transformers' rule)
        need_weights = kwargs.get("output_depth_weights", getattr(self.config, "output_depth_weights", False))
        depth_states = DepthStates(self.config.unrolled_depth, need_weights=bool(need_weights), token_ids=input_ids)
        for loop in range(self.config.num_loops):
            for layer_type, layer in zip(self.config.layer_types, self.layers, strict=True):
                stream = layer(
                    stream, residual=residual, mixer=mixer, loop=loop, position_embeddings=position_embeddings,
                    attention_mask=masks[layer_type], depth_states=depth_states, cache=cache,
                    attn_implementation=implementation, **kwargs,
                )
        return DepthAttentionModelOutput(
            last_hidden_state=self.norm(residual.final(stream) if residual is not None else stream),
            cache=cache if use_cache else None,
        )


class DepthAttentionForCausalLM(DepthAttentionPreTrainedModel, GenerationMixin):  # type: ignore[misc]  # as above
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    # transformers annotates it tuple[str, str]; its own models (Qwen3's) give lists, which its pipeline code reads
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}  # type: ignore[dict-item]

    def __init__(self, config: DepthAttentionConfig):
        super().__init__(config)
        self.model = DepthAttentionModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @cache_kwarg
    @can_return_tuple
    def forward(  # type: ignore[misc]  # TransformersKwargs repeats position_ids, as in Qwen3's signature
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> DepthAttentionCausalLMOutput:
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
            inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs,
        )
        hidden_states = out.last_hidden_state
        logits = self.lm_head(slice_logits_to_keep(hidden_states, logits_to_keep))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return DepthAttentionCausalLMOutput(
            loss=loss, logits=logits, cache=out.cache, hidden_states=out.hidden_states,
            attentions=out.attentions, depth_weights=out.depth_weights,
        )

    @classmethod
    def from_pretrained_decoder(cls, model_or_dir, **depth_settings) -> DepthAttentionForCausalLM:
        """A Depth-Attention (or, with cross_layer="vanilla", vanilla) model with a decoder checkpoint's weights.

        Depth-Attention adds no parameters, so every tensor is taken as it is. `model_or_dir` is a transformers
        Llama, Mistral, Qwen2 or Qwen3 causal LM, a depthattn model (another method on the same backbone), or a
        local folder holding one of them or a checkpoint of the Depth-Attention reference implementation
        (`depthattn.convert`); `depth_settings` are config fields over the source's.
        """
        return decoder_to_depth_attention(cls, model_or_dir, **depth_settings)

    @classmethod
    def from_qwen3(cls, model_or_dir, **depth_settings) -> DepthAttentionForCausalLM:
        """`from_pretrained_decoder` for Qwen3 checkpoints only."""
        return decoder_to_depth_attention(cls, model_or_dir, families=("qwen3",), **depth_settings)


def _embed(embed_tokens: nn.Embedding, input_ids: torch.Tensor) -> torch.Tensor:
    """Embed `input_ids`, with a clear error for ids outside the vocabulary. On a CPU the embedding's own
    IndexError is translated (free when all ids are valid); elsewhere a bad id would be a device-side assert
    that ends the process, so the ids are checked first."""
    if input_ids.device.type != "cpu" and not torch.compiler.is_compiling():
        _check_token_ids(input_ids, embed_tokens.num_embeddings)
        return embed_tokens(input_ids)
    try:
        return embed_tokens(input_ids)
    except IndexError:
        _check_token_ids(input_ids, embed_tokens.num_embeddings)
        raise


def _check_token_ids(input_ids: torch.Tensor, vocab_size: int):
    if input_ids.numel() == 0:
        return
    low, high = torch.stack(torch.aminmax(input_ids)).tolist()
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}) (the config's vocab_size), got ids from {low} to {high}; "
            "check that the tokenizer matches the model"
        )


# Auto classes find the models from here on; the first config imports this module (config.BEFORE_EACH_CONFIG)
AutoModel.register(DepthAttentionConfig, DepthAttentionModel, exist_ok=True)
AutoModelForCausalLM.register(DepthAttentionConfig, DepthAttentionForCausalLM, exist_ok=True)
register_for_transformers_serve(DepthAttentionForCausalLM)  # `transformers serve` finds it by name
