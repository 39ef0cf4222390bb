"""A Qwen3-style decoder with Depth-Attention or another cross-layer method, optionally looped.

State-dict keys are those of transformers' Qwen3ForCausalLM; a baseline's parameters (`depthattn.methods`) live
under `model.cross_layer`. With `num_loops` K the stack of layers runs K times with shared weights; unrolled step
`u = loop * num_hidden_layers + layer` has KV-cache slot `u` (caches built from the config have one slot per unrolled
step: `DepthAttentionConfig.get_text_config`), and depth sources are chosen over the unrolled depth.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, slice_logits_to_keep
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .config import DepthAttentionConfig
from .depth import DepthState
from .methods import METHODS, CrossLayerMethod, Residual, build_method
from .methods.base import rms_normalize


@dataclass
class DepthAttentionModelOutput(BaseModelOutputWithPast):
    """`depth_weights`: per layer, (B, Hkv, T, |sources| + 1) float32 weights with self last; None without sources."""

    depth_weights: tuple[torch.Tensor | None, ...] | None = None


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
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DepthAttentionRotaryEmbedding(nn.Module):
    def __init__(self, config: DepthAttentionConfig):
        super().__init__()
        self.config = config
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        self.rope_type = config.rope_parameters["rope_type"]
        init_fn = self.compute_default_rope_parameters if self.rope_type == "default" else ROPE_INIT_FUNCTIONS[
            self.rope_type]
        inv_freq, self.attention_scaling = init_fn(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: DepthAttentionConfig, **kwargs) -> tuple[torch.Tensor, float]:
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, 1.0

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)  # (B, T, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, d)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, Hkv, T, d) -> (B, Hkv * n_rep, T, d), query head h reading KV head h // n_rep."""
    if n_rep == 1:
        return x
    batch, num_kv_heads, seq_len, head_dim = x.shape
    return x[:, :, None].expand(batch, num_kv_heads, n_rep, seq_len, head_dim).reshape(batch, -1, seq_len, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    key, value = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, Hq, T, S)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class DepthAttentionAttention(nn.Module):
    def __init__(self, config: DepthAttentionConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = DepthAttentionRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = DepthAttentionRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.num_layers = config.num_hidden_layers
        # sources per loop: unrolled step loop * L + layer_idx reads these unrolled steps (the method's choice)
        method = METHODS[config.cross_layer]
        steps = method.step_sources(config)
        self.loop_depth_sources = [steps[loop * self.num_layers + layer_idx] for loop in range(config.num_loops)]
        self.depth_sources = self.loop_depth_sources[0]
        # Depth-Attention's optional learned score bias (methods/depth_attention.py), under this module's keys
        self.depth_score_bias = method.score_bias(config, self.loop_depth_sources)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        depth_states: list[DepthState | None],
        cache: Cache | None = None,
        attn_implementation: str = "sdpa",
        loop: int = 0,
        method: CrossLayerMethod | None = None,
        **kwargs,
    ):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)  # (B, Hq, T, d)
        key = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)  # (B, Hkv, T, d)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # (B, Hkv, T, d)
        query, key = apply_rotary_pos_emb(query, key, *position_embeddings)

        state, depth_weights = DepthState(key, key, value), None
        sources = self.loop_depth_sources[loop]
        if sources:  # a method acting inside attention mixes its sources' states into this step's
            state, depth_weights = method.mix(self, query, state, [depth_states[j] for j in sources],
                                              loop * self.num_layers + self.layer_idx)
        key, value = state.key, state.value
        if cache is not None:  # the mixed state takes the plain state's slot; one slot per unrolled step
            key, value = cache.update(key, value, self.layer_idx + loop * self.num_layers, kwargs=kwargs)

        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(attn_implementation, eager_attention_forward)
        out, attn_weights = attention(
            self, query, key, value, attention_mask,
            dropout=self.config.attention_dropout if self.training else 0.0, scaling=self.scaling, **kwargs,
        )
        out = self.o_proj(out.reshape(*input_shape, -1).contiguous())
        return out, state, depth_weights, attn_weights


class DepthAttentionDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: DepthAttentionConfig, layer_idx: int):
        super().__init__()
        self.self_attn = DepthAttentionAttention(config, layer_idx)
        self.mlp = DepthAttentionMLP(config)
        self.input_layernorm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, depth_states, cache=None,
                attn_implementation="sdpa", loop=0, residual: Residual | None = None,
                method: CrossLayerMethod | None = None, **kwargs):
        """`hidden_states` is the residual stream: a tensor, or `residual`'s own stream object."""
        attention = dict(cache=cache, attn_implementation=attn_implementation, loop=loop, method=method, **kwargs)
        if residual is None:  # the plain residual, inline
            attn_out, state, depth_weights, attn_weights = self.self_attn(
                self.input_layernorm(hidden_states), position_embeddings, attention_mask, depth_states, **attention,
            )
            hidden_states = hidden_states + attn_out
            hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
            return hidden_states, state, depth_weights, attn_weights

        sublayer = 2 * (loop * self.self_attn.num_layers + self.self_attn.layer_idx)
        x = residual.read(hidden_states, sublayer)
        attn_out, state, depth_weights, attn_weights = self.self_attn(
            self.input_layernorm(x), position_embeddings, attention_mask, depth_states, **attention,
        )
        hidden_states = residual.write(hidden_states, sublayer, attn_out)
        x = residual.read(hidden_states, sublayer + 1)
        hidden_states = residual.write(hidden_states, sublayer + 1, self.mlp(self.post_attention_layernorm(x)))
        return hidden_states, state, depth_weights, attn_weights


class DepthAttentionPreTrainedModel(PreTrainedModel):
    config: DepthAttentionConfig
    config_class = DepthAttentionConfig
    base_model_prefix = "model"
    _no_split_modules = ["DepthAttentionDecoderLayer"]
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    def _activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers=1, offload=False):
        if (activation_checkpointing_kwargs or {}).get("use_reentrant"):
            raise ValueError("use_reentrant=True would lose the gradients that reach earlier layers through depth mixing "
                             "and the cross-layer methods (they are not positional tensor inputs of a layer); "
                             "leave use_reentrant at its default, False")
        super()._activation_checkpointing_enable(activation_checkpointing_kwargs, every_n_layers, offload)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        # transformers records the new size in get_text_config(), which for a looped model is a copy (config.py)
        self.config.vocab_size = embeddings.num_embeddings
        return embeddings

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, DepthAttentionAttention) and module.depth_score_bias is not None:
            for bias in module.depth_score_bias:
                init.zeros_(bias)
        if isinstance(module, CrossLayerMethod):
            # the method's documented initialisation (guarded: loaded values stay), drawn from its own random
            # stream, so that with the same seed the backbone starts from vanilla's weights whatever the method
            devices = [p.device for p in module.parameters() if p.device.type == "cuda"][:1]
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(torch.initial_seed() + 1)
                module.reset_parameters()


class DepthAttentionModel(DepthAttentionPreTrainedModel):
    def __init__(self, config: DepthAttentionConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DepthAttentionDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = DepthAttentionRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = DepthAttentionRotaryEmbedding(config)
        self.cross_layer = build_method(config)  # the method's parameters: none for vanilla and Depth-Attention
        # unrolled steps whose state a later step reads; the others' states are dropped as soon as possible
        self._read_later = {j for sources in self.cross_layer.step_sources(config) for j in sources}
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_depth_weights: bool = False,
        **kwargs,
    ) -> DepthAttentionModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = _embed(self.embed_tokens, input_ids)
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        slots = self.config.unrolled_depth  # one per unrolled step
        if isinstance(cache, Cache) and cache.layer_class_to_replicate is None and len(cache) < slots:
            raise ValueError(f"this cache holds {len(cache)} layer slots; the model needs {slots} "
                             "(num_hidden_layers x num_loops): build it from this model's config, e.g. "
                             "DynamicCache(config=model.config)")
        if position_ids is None:
            past = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None] + past  # (1, T)

        # attention weights come from the eager path only, and each path wants its own kind of mask
        implementation = "eager" if output_attentions else self.config._attn_implementation
        if isinstance(attention_mask, dict):  # built by `generate` for the configured implementation
            if implementation != self.config._attn_implementation:
                raise ValueError("output_attentions with a prepared mask needs attn_implementation='eager'")
            mask = attention_mask["full_attention"]
        else:
            mask_config = self.config
            if implementation != self.config._attn_implementation:
                mask_config = copy.copy(self.config)
                mask_config._attn_implementation = implementation
            mask = create_causal_mask(config=mask_config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                      cache=cache, position_ids=position_ids)

        position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
        residual = self.cross_layer if isinstance(self.cross_layer, Residual) else None
        stream = inputs_embeds if residual is None else residual.init(inputs_embeds)
        depth_states: list[DepthState | None] = [None] * self.config.unrolled_depth
        all_hidden, all_attn, all_depth = [], [], []
        for loop in range(self.config.num_loops):
            for i, layer in enumerate(self.layers):
                step = loop * len(self.layers) + i
                if output_hidden_states:
                    all_hidden.append(stream if residual is None else residual.hidden(stream))
                stream, state, depth_weights, attn_weights = layer(
                    stream, position_embeddings, mask, depth_states, cache=cache,
                    attn_implementation=implementation, loop=loop, residual=residual, method=self.cross_layer,
                    **kwargs,
                )
                if step in self._read_later:
                    depth_states[step] = state
                all_attn.append(attn_weights)
                all_depth.append(depth_weights)
        hidden_states = self.norm(stream if residual is None else residual.final(stream))
        if output_hidden_states:
            all_hidden.append(hidden_states)

        return DepthAttentionModelOutput(
            last_hidden_state=hidden_states,
            cache=cache if use_cache else None,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(all_attn) if output_attentions else None,
            depth_weights=tuple(all_depth) if output_depth_weights else None,
        )


class DepthAttentionForCausalLM(DepthAttentionPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: DepthAttentionConfig):
        super().__init__(config)
        self.model = DepthAttentionModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
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
    def from_qwen3(cls, model_or_path, **depth_settings) -> "DepthAttentionForCausalLM":
        """A Depth-Attention (or, with cross_layer="none", vanilla) model with a Qwen3 checkpoint's weights.

        Depth-Attention adds no parameters, so every tensor is taken as it is. `model_or_path` is a
        `Qwen3ForCausalLM` or a local directory holding one.
        """
        from .convert import qwen3_to_depth_attention

        return qwen3_to_depth_attention(cls, model_or_path, **depth_settings)


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
