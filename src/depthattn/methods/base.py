"""The protocols of a cross-layer method's module: what every method's module is (`CrossLayerMethod`, which derives
from `MethodDescription`, what is known without a model: descriptions/base.py) and what it does in the model (an
`AttentionMixer` inside attention, or a `Residual` owning the residual stream); the plain decoder is the reference
behaviour of both."""

from __future__ import annotations

import abc

import torch
from torch import nn

from ..layer_states import DepthState, DepthStates
from ..ops.norm import rms_normalize
from .descriptions.base import (
    COST_MEMBERS,
    AttentionMixerDescription,
    FlopTerm,
    MethodDescription,
    NoExtraCost,
    ResidualDescription,
    check_members,
    undeclared_costs,
)

__all__ = ["COST_MEMBERS", "AttentionMixer", "CrossLayerMethod", "FlopTerm", "NoExtraCost", "Residual",
           "overrides_attention", "rms_normalize", "undeclared_costs"]


class CrossLayerMethod(MethodDescription, nn.Module):
    """The module of a `DepthAttentionConfig.cross_layer` method: its parameters and what the model calls. Its
    parameters live under `DepthAttentionModel.cross_layer`, so that vanilla and Depth-Attention checkpoints (which
    have none) keep exactly Qwen3's keys. A built-in method's module derives from its description (descriptions/),
    whose members it has; a method may also declare them here, on one class (`MethodDescription`).

    What it does in the model is the protocol of its family, which the model picks once, when it is built:
    an `AttentionMixer` acts inside attention, a `Residual` owns the residual stream; a method of neither (`Vanilla`)
    runs the plain decoder. Here, everything optional has a default; the costs are required (`MethodDescription`).

    `reset_parameters` sets the method's documented initialisation of all its parameters, those of its submodules
    (an nn.Linear, a ParameterList) included: nothing else initialises them.
    `DepthAttentionPreTrainedModel._init_weights` calls it from the method's own random stream; it must use
    `transformers.initialization` so that values loaded by `from_pretrained` survive.
    """

    def __init__(self, config):
        super().__init__()

    @classmethod
    def module_class(cls) -> type[CrossLayerMethod]:
        return cls

    @classmethod
    def check_family(cls, name: str):
        """Raise ValueError where the class would run as something else than it says: of both families, without a
        member its family requires, or a mixer that changes nothing in attention."""
        if issubclass(cls, AttentionMixer) and issubclass(cls, Residual):
            raise ValueError(f"{cls.__name__} derives from both AttentionMixer and Residual; a method is of one "
                             "family (docs/methods.md#what-the-model-calls)")
        check_members(cls, name)
        if issubclass(cls, AttentionMixer) and not overrides_attention(cls):
            raise ValueError(f"{cls.__name__} (cross_layer={name!r}) is an AttentionMixer but defines neither forward "
                             "(the state a step attends with) nor attend (sequence attention itself), so it would run "
                             "as the plain decoder; define one (docs/methods.md#what-the-model-calls)")

    def reset_parameters(self):
        pass

    def layer_mixing(self) -> dict[str, list[float]] | None:
        """Learned weights of the method's cross-layer mix, by what they weigh, per unrolled step from step 1 on
        (`depthattn.study.explain` plots them), or None."""
        return None

    def switch(self, name: str, value):
        """Compute with the config field `name` (one of `switchable_fields`) set to `value` from now on."""
        raise NotImplementedError(f"{type(self).__name__} declares {name!r} switchable but does not switch it")


class AttentionMixer(CrossLayerMethod, AttentionMixerDescription):
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


class Residual(CrossLayerMethod, ResidualDescription):
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
