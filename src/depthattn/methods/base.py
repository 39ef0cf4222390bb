"""The protocols of a cross-layer method: what every method is (`CrossLayerMethod`) and what it does in the model
(an `AttentionMixer` inside attention, or a `Residual` owning the residual stream); the plain decoder is the
reference behaviour of both."""

from __future__ import annotations

import abc
import dataclasses

import torch
from torch import nn

from ..config import ConfigField
from ..layer_states import DepthState, DepthStates


@dataclasses.dataclass(frozen=True)
class FlopTerm:
    """One kind of extra arithmetic, per token. `op`: how our model runs it ("matmul": mm / bmm / mv, which
    FlopCounterMode counts; "elementwise": multiplies, adds and sums). `role`: "weights" (computing the mixing
    weights: depth scores, AttnRes logits, hyper-connection coefficients) or "mix" (the weighted sums themselves).
    `paper` / `model`: whether the paper's convention / the literal count of our model includes it."""

    what: str
    flops: int
    op: str
    role: str = "mix"
    paper: bool = True
    model: bool = True


class CrossLayerMethod(nn.Module, metaclass=abc.ABCMeta):
    """What every `DepthAttentionConfig.cross_layer` method is, and what is known about it without building a model:
    its config, where it runs, what it tells about itself and its costs. Its parameters live under
    `DepthAttentionModel.cross_layer`, so that vanilla and Depth-Attention checkpoints (which have none) keep
    exactly Qwen3's keys.

    What it does in the model is the protocol of its family, which the model picks once, when it is built:
    an `AttentionMixer` acts inside attention, a `Residual` owns the residual stream; a method of neither (`Vanilla`)
    runs the plain decoder. Here, everything optional has a default; the costs are required.

    `config_fields` declares the method's own `DepthAttentionConfig` fields (name: default and meaning), which every
    config then has; `check_config` checks their values. `reset_parameters` sets the method's documented
    initialisation of all its parameters, those of its submodules (an nn.Linear, a ParameterList) included: nothing
    else initialises them. `DepthAttentionPreTrainedModel._init_weights` calls it from the method's own random
    stream; it must use `transformers.initialization` so that values loaded by `from_pretrained` survive.
    `inference_state` states the extra state the method holds at inference (docs/method.md#baselines).

    Analytic costs per token over a vanilla decoder with the same backbone, in the conventions of
    `depthattn.evaluate.costs` (L = unrolled depth, D = hidden size, d_kv = num_key_value_heads * head_dim):
    `extra_parameters`, `flop_terms`, `io_elements` and `extra_state_elements` at a context (`COST_MEMBERS`). Every
    method defines them, or derives from `NoExtraCost` to say it adds none; `register` refuses one that does
    neither, so that no method reports zero costs by omission.
    """

    # its config: its own fields, named variants of them, and those that change how it computes, not what (its
    # kernels), which a built model switches in place (`DepthAttentionPreTrainedModel.switch_method_field`)
    config_fields: dict[str, ConfigField] = {}
    presets: dict[str, dict] = {}  # named variants: config fields over the method's defaults (depthattn.presets)
    switchable_fields: tuple[str, ...] = ()
    # per switchable field, the values it switches to on any machine (no GPU, no compiler): the conformance suite
    # switches a built model to each and expects the same outputs
    switch_values: dict[str, tuple] = {}
    # settings besides the defaults that every check of the conformance suite (tests/methods/test_conformance.py, the
    # looped, continuous-batching, checkpointing, tensor-parallel and vLLM tests) runs too, each taking code paths the
    # defaults do not: name -> config fields over the defaults
    checked_variants: dict[str, dict] = {}

    # where it runs, and why not where it cannot (see also `check_tensor_parallel`); everywhere else it runs: looped,
    # with activation checkpointing, continuous batching, tensor parallelism (the conformance suite checks each)
    # reentrant activation checkpointing keeps every gradient only when nothing reaches a layer except its
    # positional tensor inputs (no depth states, no stream object), i.e. the vanilla decoder
    reentrant_checkpointing_safe: bool = False
    packed_refusal: str = ""  # why it cannot run packed sequences (continuous batching, flash varlen), if it cannot
    vllm_refusal: str = ""  # why the vLLM plugin (depthattn.serving.vllm) cannot serve the method; empty: it can

    # what it tells about itself (with the analytic costs below)
    inference_state: str = ""
    maps_depth_weights: bool = False  # `output_depth_weights` weighs each step's sources per token (a depth map)
    # the title of its depth map (`depthattn depth-map`), formatted with the map's record: `cross_layer`, `samples`,
    # `seq_len` and the method's `settings`
    depth_map_title: str = "{cross_layer} depth weights ({samples} x {seq_len} tokens)"

    def __init__(self, config):
        super().__init__()

    @classmethod
    def check_config(cls, config):
        """Raise ValueError, naming the field, if a value of `config_fields` is invalid (every config is checked by
        every method, whatever its `cross_layer`)."""

    def reset_parameters(self):
        pass

    def layer_mixing(self) -> dict[str, list[float]] | None:
        """Learned weights of the method's cross-layer mix, by what they weigh, per unrolled step from step 1 on
        (`depthattn.study.explain` plots them), or None."""
        return None

    def switch(self, name: str, value):
        """Compute with the config field `name` (one of `switchable_fields`) set to `value` from now on."""
        raise NotImplementedError(f"{type(self).__name__} declares {name!r} switchable but does not switch it")

    @classmethod
    def settings(cls, config) -> dict:
        """The method's config fields as the model runs them (defaults resolved), for messages and records."""
        return {name: getattr(config, name) for name in cls.config_fields}

    @classmethod
    def check_tensor_parallel(cls, config, ranks: int):
        """Raise ValueError, naming `tensor_parallel_size` and the fix, where the method cannot be split over `ranks`
        tensor-parallel ranks (vLLM's, and transformers' `tp_plan`)."""

    @classmethod
    def extra_parameters(cls, config) -> int:
        """Parameters of the method (`count_parameters(model)["extra_over_vanilla"]`)."""
        raise _undeclared_cost(cls)

    @classmethod
    def flop_terms(cls, config) -> list[FlopTerm]:
        """The extra arithmetic per token, term by term."""
        raise _undeclared_cost(cls)

    @classmethod
    def io_elements(cls, config) -> dict[str, int]:
        """Extra activation elements read and written per token: {"read": ..., "write": ...}."""
        raise _undeclared_cost(cls)

    @classmethod
    def extra_state_elements(cls, config, context: int) -> int:
        """Elements held beyond the vanilla KV cache at the peak of a prefill of `context` tokens."""
        raise _undeclared_cost(cls)

    @classmethod
    def cost_details(cls, config) -> dict:
        """Method-specific entries of its `depthattn.evaluate.costs.method_costs` record."""
        return {}


class AttentionMixer(CrossLayerMethod):
    """A method acting inside attention (Depth-Attention, value residual, value embeddings, MoDA): it declares, per
    unrolled step, the earlier steps whose attention state it reads (`step_sources`, required), and a step's state is
    kept for the forward pass only when a later step reads it. The attention of step `u` does

        state = DepthState(key, key, value)                  # its own, rotated
        if method.acts_at(u): state, weights = method(attention, query, state, u, states)
        if method.keeps_state(u): states[u] = state
        out = method.attend(attention_fn, ..., u, states, ...)   # sequence attention over the cache

    and the MLP of step `u` shows its normed input to `mlp_input`. The residual stream stays the plain one.
    Required besides `step_sources`: `forward` (needed wherever `acts_at`, which by default is where a step has
    sources) or `attend`, or both: with neither the method would run as the plain decoder (`overrides_attention`).
    Optional: `acts_at`, `mlp_input`.
    """

    def __init__(self, config):
        super().__init__(config)
        self.sources = self.step_sources(config)  # per unrolled step, the earlier steps it reads
        read_later = {j for sources in self.sources for j in sources}
        self.kept = [u in read_later for u in range(config.unrolled_depth)]  # states a later step reads

    @staticmethod
    @abc.abstractmethod
    def step_sources(config) -> list[list[int]]:
        """For every unrolled step, the earlier steps whose attention state it reads (may be none: `[]`)."""

    def acts_at(self, step: int) -> bool:
        """Whether the attention of unrolled step `step` calls the method (`forward`) before sequence attention."""
        return bool(self.sources[step])

    def keeps_state(self, step: int) -> bool:
        """Whether a later step reads the state of step `step` (`DepthStates`)."""
        return self.kept[step]

    def forward(self, attention: nn.Module, query: torch.Tensor, state: DepthState, step: int,
                states: DepthStates) -> tuple[DepthState, torch.Tensor | None]:
        """The state that step `step`'s attention uses and caches, given its own (query: (B, Hq, T, d); state:
        (B, Hkv, T, d) each) and the forward pass's `states` (its sources' states `states[j]`, the token ids),
        and depth weights (B, Hkv, T, n) or None (the model records them as `depth_weights` through transformers'
        output hooks; when `states.need_weights` is False it does not record them, and a method may skip them)."""
        raise NotImplementedError(f"{type(self).__name__} acts inside attention but does not say how")

    def attend(self, attention_fn, module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask, step: int, states: DepthStates, position_embeddings, **kwargs):
        """Sequence attention of step `step` (query (B, Hq, T, d); key, value (B, Hkv, S, d), the cache's): by
        default `attention_fn`, the implementation transformers dispatches to; a method whose depth part joins
        the attention's softmax (MoDA) computes both. Returns the output (B, T, Hq, d) and the weights or None."""
        return attention_fn(module, query, key, value, mask, **kwargs)

    def mlp_input(self, step: int, hidden: torch.Tensor, states: DepthStates):
        """Sees the normed input (B, T, D) of step `step`'s MLP; a method that hands it on keeps it in `states`."""


def overrides_attention(cls: type[AttentionMixer]) -> bool:
    """Whether `cls` defines `forward` or `attend`, without which an `AttentionMixer` changes nothing."""
    return cls.forward is not AttentionMixer.forward or cls.attend is not AttentionMixer.attend


COST_MEMBERS = ("extra_parameters", "flop_terms", "io_elements", "extra_state_elements")


def undeclared_costs(cls: type[CrossLayerMethod]) -> list[str]:
    """The cost members that `cls` leaves to `CrossLayerMethod`, which has no numbers to give."""
    return [name for name in COST_MEMBERS if getattr(cls, name).__func__ is getattr(CrossLayerMethod, name).__func__]


def _undeclared_cost(cls) -> NotImplementedError:
    return NotImplementedError(f"{cls.__name__} does not declare its costs: define {', '.join(undeclared_costs(cls))} "
                               "(docs/methods.md#costs), or derive it from NoExtraCost if it adds none")


class NoExtraCost:
    """Mixed into a method (before `CrossLayerMethod`) to declare that it costs nothing over the vanilla decoder:
    no parameters, arithmetic, activation traffic or state."""

    @classmethod
    def extra_parameters(cls, config) -> int:
        return 0

    @classmethod
    def flop_terms(cls, config) -> list[FlopTerm]:
        return []

    @classmethod
    def io_elements(cls, config) -> dict[str, int]:
        return {"read": 0, "write": 0}

    @classmethod
    def extra_state_elements(cls, config, context: int) -> int:
        return 0


class Residual(CrossLayerMethod):
    """A hidden-state method (DenseFormer, AttnRes, mHC, hyper-connections, MUDDFormer): it owns the stream that runs
    from the embeddings to the final norm, opaque to the decoder: a (B, T, D) tensor or the method's own small state
    object. There are `num_sublayers = 2 * unrolled_depth`; the decoder layer does, per sublayer `s` (`2 u`
    attention, `2 u + 1` MLP of unrolled step `u`),

        x = method.read(stream, s)               # what the sublayer reads, before its norm
        stream = method.write(stream, s, sublayer(norm(x)))

    and the model does `stream = method.init(embeds)` first and `norm(method.final(stream))` last. Required: `init`,
    `read`, `write`, `final`, `hidden`. Optional: `read_key_value`, for a multiway method (MUDDFormer), which gives
    the keys and values of an attention sublayer inputs of their own; the queries read `x`.
    """

    inference_state = "none"
    vllm_refusal = ("it changes the residual stream between layers, keeping earlier blocks' outputs per token "
                    "(docs/method.md#baselines), and the vLLM model keeps vLLM's plain residual stream")

    def __init__(self, config):
        super().__init__(config)
        self.num_sublayers = 2 * config.unrolled_depth

    @abc.abstractmethod
    def init(self, embeds: torch.Tensor):
        """The stream before the first sublayer, from the (B, T, D) embeddings."""

    @abc.abstractmethod
    def read(self, stream, sublayer: int) -> torch.Tensor:
        """The (B, T, D) input of sublayer `sublayer`, before its norm."""

    @abc.abstractmethod
    def write(self, stream, sublayer: int, out: torch.Tensor):
        """The stream after sublayer `sublayer` gave `out` (B, T, D)."""

    @abc.abstractmethod
    def final(self, stream) -> torch.Tensor:
        """The (B, T, D) hidden state that goes into the final norm."""

    @abc.abstractmethod
    def hidden(self, stream) -> torch.Tensor:
        """A (B, T, D) view of the stream between layers, for `output_hidden_states`."""

    def read_key_value(self, stream, sublayer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For an attention sublayer: the (B, T, D) inputs of its keys and of its values, before the norm, when
        they differ from what `read` gives the queries; None (the usual case) when all three read `read`'s."""
        return None


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dimension, in float32 at least."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
