"""`DepthAttentionForCausalLM` for vLLM: depthattn's Qwen3-style decoder from vLLM's layers (parallel linear layers,
rotary embedding, `Attention` over the paged KV cache), with depthattn's own cross-layer method module at
`model.cross_layer` (its math and its checkpoint keys, `depthattn.methods`).

Methods that act inside attention are served: vanilla, Depth-Attention (every preset), value residual and value
embeddings. Each mixes, per token, the current tokens' states of earlier unrolled steps of the same forward pass
before sequence attention, so the mixed value takes the step's own KV-cache slot and nothing else is cached
(docs/method.md#inference). A looped model (`num_loops` K) runs the stack K times and has one `Attention`, so one
cache slot, per unrolled step. Methods that change the residual stream between layers are refused.

vLLM flattens a batch into T tokens; depthattn's ops take (B, H, T, d), so the states go in as one row, B = 1.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from depthattn.config import DepthAttentionConfig
from depthattn.layer_states import DepthState, DepthStates
from depthattn.methods import AttentionMixer, build_method
from depthattn.serving.vllm import check_servable

# checkpoint name -> (parameter name, shard) for vLLM's fused projections
STACKED = [(".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", 0), (".up_proj", ".gate_up_proj", 1)]


class DepthAttentionAttention(nn.Module):
    def __init__(self, config: DepthAttentionConfig, layer: int, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        self.head_dim: int = config.head_dim  # type: ignore[assignment]  # None only until the config derives it
        self.num_heads = config.num_attention_heads // tp
        self.num_kv_heads = max(1, config.num_key_value_heads // tp)  # replicated below one KV head per rank
        self.scaling = self.head_dim**-0.5  # depthattn's methods read it too
        qkv_bias = config.attention_bias or config.qkv_bias
        self.qkv_proj = QKVParallelLinear(config.hidden_size, self.head_dim, config.num_attention_heads,
                                          config.num_key_value_heads, bias=qkv_bias, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(config.num_attention_heads * self.head_dim, config.hidden_size,
                                        bias=config.attention_bias, prefix=f"{prefix}.o_proj")
        self.rotary_emb = get_rope(self.head_dim, config.max_position_embeddings,
                                   rope_parameters=config.rope_parameters)
        self.qk_norm = config.use_qk_norm
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm_after_rope = config.k_norm_after_rope
        window = config.sliding_window if config.layer_types[layer] == "sliding_attention" else None
        # one cache slot per unrolled step u = loop * L + layer, named by u (vLLM reads the slot from the name)
        L, model_prefix = config.num_hidden_layers, prefix.rsplit(".layers.", 1)[0]
        self.attn = nn.ModuleList(
            Attention(self.num_heads, self.head_dim, self.scaling, num_kv_heads=self.num_kv_heads,
                      cache_config=vllm_config.cache_config, per_layer_sliding_window=window,
                      prefix=f"{model_prefix}.layers.{loop * L + layer}.self_attn.attn")
            for loop in range(config.num_loops))

    def forward(self, positions, x, loop: int, step: int, mixer: AttentionMixer | None, states: DepthStates):
        tokens = x.shape[0]
        q, k, v = self.qkv_proj(x)[0].split([self.num_heads * self.head_dim, *2 * [self.num_kv_heads * self.head_dim]],
                                            dim=-1)
        q, k, v = (t.reshape(tokens, -1, self.head_dim) for t in (q, k, v))  # (T, H, d)
        if self.qk_norm:
            q = self.q_norm(q)
            if not self.k_norm_after_rope:
                k = self.k_norm(k)
        q, k = self.rotary_emb(positions, q.reshape(tokens, -1), k.reshape(tokens, -1))
        q, k = q.view(tokens, -1, self.head_dim), k.view(tokens, -1, self.head_dim)
        if self.qk_norm and self.k_norm_after_rope:  # the reference implementation's order (docs/method.md)
            k = self.k_norm(k)

        if mixer is not None:  # in depthattn's layout (1, H, T, d), as views
            query, key, value = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            state = DepthState(key, key, value)
            if mixer.acts_at(step):
                state, _ = mixer(self, query, state, step, states)
            if mixer.keeps_state(step):
                states[step] = state
            k, v = (t.squeeze(0).transpose(0, 1) for t in (state.key, state.value))  # (T, Hkv, d)
        k, v = k.reshape(tokens, -1), v.reshape(tokens, -1)  # (T, Hkv * d)
        out = self.attn[loop](q.reshape(tokens, -1), k, v)  # writes k and the mixed v into step's cache slot
        return self.o_proj(out)[0]


class DepthAttentionMLP(nn.Module):
    def __init__(self, config: DepthAttentionConfig, prefix: str):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [config.intermediate_size] * 2,
                                                       bias=config.mlp_bias, prefix=f"{prefix}.gate_up_proj")
        self.down_proj = RowParallelLinear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias,
                                           prefix=f"{prefix}.down_proj")
        self.act_fn = SiluAndMul()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_up_proj(x)[0]))[0]


class DepthAttentionDecoderLayer(nn.Module):
    def __init__(self, config: DepthAttentionConfig, layer: int, vllm_config: VllmConfig, prefix: str):
        super().__init__()
        self.layer = layer
        self.self_attn = DepthAttentionAttention(config, layer, vllm_config, f"{prefix}.self_attn")
        self.mlp = DepthAttentionMLP(config, f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions, x, residual, loop: int, step: int, mixer: AttentionMixer | None, states: DepthStates):
        # vLLM's fused norms: norm(x, residual) adds x to the residual stream and normalises the sum
        x, residual = self.input_layernorm(x, residual) if residual is not None else (self.input_layernorm(x), x)
        x = self.self_attn(positions, x, loop, step, mixer, states)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": 0, "inputs_embeds": 0})
class DepthAttentionModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = self.config = vllm_config.model_config.hf_config
        check_servable(config, get_tensor_model_parallel_world_size())
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size,
                                                   prefix=f"{prefix}.embed_tokens")
        self.layers = nn.ModuleList(DepthAttentionDecoderLayer(config, i, vllm_config, f"{prefix}.layers.{i}")
                                    for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.cross_layer = build_method(config)  # depthattn's module: its parameters, sources and mixing
        self.mixes = isinstance(self.cross_layer, AttentionMixer)  # else vanilla: a Residual is refused above

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (T, D)
        token_ids = None if input_ids is None else input_ids.unsqueeze(0)  # (1, T), for value embeddings
        states = DepthStates(self.config.unrolled_depth, need_weights=False, token_ids=token_ids)
        residual, L = None, self.config.num_hidden_layers
        mixer = self.cross_layer if self.mixes else None
        for loop in range(self.config.num_loops):
            for layer in self.layers:
                x, residual = layer(positions, x, residual, loop, loop * L + layer.layer, mixer, states)
        return self.norm(x, residual)[0]


class DepthAttentionForCausalLM(nn.Module):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = self.config = vllm_config.model_config.hf_config
        self.model = DepthAttentionModel(vllm_config=vllm_config, prefix=f"{prefix}.model" if prefix else "model")
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size,
                                      prefix=f"{prefix}.lm_head" if prefix else "lm_head")
        if config.tie_word_embeddings:
            self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        self.logits_processor = LogitsProcessor(config.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None) -> torch.Tensor:
        return self.model(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if self.config.tie_word_embeddings and name == "lm_head.weight":
                continue
            for checkpoint_part, part, shard in STACKED:
                if checkpoint_part in name:
                    name = name.replace(checkpoint_part, part)
                    params[name].weight_loader(  # type: ignore[attr-defined]  # vLLM's layers attach it
                        params[name], tensor, shard)
                    break
            else:
                getattr(params[name], "weight_loader", default_weight_loader)(params[name], tensor)
            loaded.add(name)
        return loaded
