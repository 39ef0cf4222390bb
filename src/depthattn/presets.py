"""Named method settings, so that a training config can say `method: depth_quarter`.

`method_settings(name, num_hidden_layers, num_loops=1)` returns the `DepthAttentionConfig` fields of a preset.
Strides are fractions of the unrolled depth `D = num_hidden_layers * num_loops` (docs/method.md#variants: depth counts
unrolled steps); the other fields keep their defaults unless given.

| preset | settings |
|---|---|
| vanilla | cross_layer="none" |
| depth_attention, depth_half | Depth-Attention, depth_stride = D // 2 (the default) |
| depth_first_layer | depth_stride = D: layer 0 is the only source |
| depth_quarter | depth_stride = D // 4 |
| depth_every | depth_stride = 1: every earlier step is a source |
| depth_uniform | depth_mix="uniform" (plain average over the default sources) |
| depth_mix_v, depth_mix_kv, depth_mix_k | depth_mix_states "v" (default), "kv", "k" |
| depth_bias | depth_score_bias=True: a learned score per layer and source, starting at zero |
| depth_static | depth_mix="uniform" with depth_score_bias: a learned mix per layer that ignores the tokens |
| depth_retrofit | depth_bias with each layer's own score at 30: converted from vanilla, it starts as vanilla |
| value_residual, denseformer, attnres, mhc, hyper_connections | cross_layer=<name>, method defaults |
"""

from __future__ import annotations

from typing import Callable

_DEPTH = {"cross_layer": "depth_attention"}


def _stride(divisor: int) -> Callable[[int], int]:
    return lambda depth: max(1, depth // divisor)


# A value that is a function receives the unrolled depth.
PRESETS: dict[str, dict] = {
    "vanilla": {"cross_layer": "none"},
    "depth_attention": {**_DEPTH, "depth_stride": _stride(2)},
    "depth_first_layer": {**_DEPTH, "depth_stride": _stride(1)},
    "depth_half": {**_DEPTH, "depth_stride": _stride(2)},
    "depth_quarter": {**_DEPTH, "depth_stride": _stride(4)},
    "depth_every": {**_DEPTH, "depth_stride": 1},
    "depth_uniform": {**_DEPTH, "depth_stride": _stride(2), "depth_mix": "uniform"},
    "depth_mix_v": {**_DEPTH, "depth_stride": _stride(2), "depth_mix_states": "v"},
    "depth_mix_kv": {**_DEPTH, "depth_stride": _stride(2), "depth_mix_states": "kv"},
    "depth_mix_k": {**_DEPTH, "depth_stride": _stride(2), "depth_mix_states": "k"},
    "depth_bias": {**_DEPTH, "depth_stride": _stride(2), "depth_score_bias": True},
    "depth_static": {**_DEPTH, "depth_stride": _stride(2), "depth_mix": "uniform", "depth_score_bias": True},
    "depth_retrofit": {**_DEPTH, "depth_stride": _stride(2), "depth_score_bias": True, "depth_self_bias_init": 30.0},
    "value_residual": {"cross_layer": "value_residual"},
    "denseformer": {"cross_layer": "denseformer"},
    "attnres": {"cross_layer": "attnres"},
    "mhc": {"cross_layer": "mhc"},
    "hyper_connections": {"cross_layer": "hyper_connections"},
}


def method_settings(name: str, num_hidden_layers: int, num_loops: int = 1) -> dict:
    """The config fields of preset `name` for a model of `num_hidden_layers` layers run `num_loops` times."""
    if name not in PRESETS:
        raise ValueError(f"method must be one of {', '.join(map(repr, PRESETS))}; got {name!r}")
    depth = num_hidden_layers * num_loops
    settings = {key: value(depth) if callable(value) else value for key, value in PRESETS[name].items()}
    return {**settings, "num_loops": num_loops}
