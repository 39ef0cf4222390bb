"""The interface every cross-layer baseline implements; the plain residual is its reference behaviour."""

from __future__ import annotations

import torch
from torch import nn


class CrossLayerMethod(nn.Module):
    """A method's parameters, living under `DepthAttentionModel.cross_layer` so that vanilla and Depth-Attention
    checkpoints keep exactly Qwen3's keys.

    `reset_parameters` sets the method's documented initialisation. `DepthAttentionPreTrainedModel._init_weights`
    calls it; it must use `transformers.initialization` so that values loaded by `from_pretrained` survive.
    `inference_state` states the extra state the method holds at inference (docs/method.md#baselines).
    """

    inference_state: str = ""

    def reset_parameters(self):
        raise NotImplementedError


class Residual(CrossLayerMethod):
    """How sublayer outputs are combined into the stream that runs from the embeddings to the final norm.

    Sublayer `s` is `2 * u` (attention) or `2 * u + 1` (MLP) of unrolled step `u`; there are
    `num_sublayers = 2 * config.unrolled_depth`. The stream is opaque to the decoder: a tensor or a method's
    own small state object. The decoder layer does, per sublayer,

        x = residual.read(stream, s)               # what the sublayer reads, before its norm
        stream = residual.write(stream, s, sublayer(norm(x)))

    and the model does `stream = residual.init(embeds)` first and `norm(residual.final(stream))` last.
    This base class is the plain residual: read = stream, write = stream + out. (The vanilla decoder does
    not go through it: it runs the same arithmetic inline.)
    """

    inference_state = "none"

    def __init__(self, config):
        super().__init__()
        self.num_sublayers = 2 * config.unrolled_depth

    def reset_parameters(self):
        pass

    def init(self, embeds: torch.Tensor):
        return embeds

    def read(self, stream, sublayer: int) -> torch.Tensor:
        return stream

    def write(self, stream, sublayer: int, out: torch.Tensor):
        return stream + out

    def final(self, stream) -> torch.Tensor:
        """The (B, T, D) hidden state that goes into the final norm."""
        return stream

    def hidden(self, stream) -> torch.Tensor:
        """A (B, T, D) view of the stream between layers, for `output_hidden_states`."""
        return stream


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dimension, in float32 at least."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
