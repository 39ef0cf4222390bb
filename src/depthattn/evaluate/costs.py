"""Analytic costs of every cross-layer method over a vanilla decoder with the same backbone (the paper's Table 2).

`method_costs(config, context, dtype_bytes)` gives, for one `DepthAttentionConfig`: parameters (total and extra
over vanilla), extra FLOPs per token, extra activation I/O per token, KV-cache bytes per token and the extra state
held at a context (prefill) of `context` tokens. `depthattn costs --preset 3b` prints the paper's Table 2.

Conventions (the paper's; with them tests/evaluate/test_costs.py reproduces its 3B numbers to the printed
precision):

- Everything is per token and counted over the unrolled depth `L = num_hidden_layers * num_loops` (sublayers:
  `2L`); `D` = hidden size, `d_kv = num_key_value_heads * head_dim`.
- FLOPs: a multiply-add is 2 FLOPs, so a weighted sum of `n` vectors of size `m` costs `2 n m` and a dot product of
  size `m` costs `2 m` (as FlopCounterMode counts a matmul). Counted: the mixing itself and the computation of the
  mixing weights up to the logits (dot products, projections). Not counted, as in the paper: normalisations
  (rms of the streams), softmax / sigmoid / tanh / Sinkhorn on the few logits, the 1/sqrt(d) scaling of depth
  scores and the group mean of the query heads (these are small or per-logit; tests/evaluate/test_costs.py shows
  exactly which operations FlopCounterMode sees on top).
- Activation I/O: bytes read plus bytes written of the method's extra activations, at `dtype_bytes` per element
  (bf16: 2). A mixing operation reads each candidate vector once per pass over it and writes its result once.
  Scalars that stay inside one fused mixing operation (depth scores, AttnRes weights) are not counted; mHC's and
  hyper-connections' coefficients come out of a separate projection and are (as in the mHC paper's own I/O table).
- Extra state at a context of T tokens: what a prefill of T tokens holds beyond the vanilla KV cache at its peak
  (the per-token state of docs/method.md#baselines times T). KV cache per token:
  `2 * L * Hkv * head_dim * dtype_bytes`; every method has vanilla's cache (Depth-Attention and value residual store
  the mixed value in the value slot).

Two places where the paper's accounting is not the literal operation count of our implementation (both kept so
that Table 2 is reproduced; `model_flops` in each record is the literal count of what the model runs):

- Depth-Attention I/O counts one mixed-value write for each of the L layers, layer 0 included although layer 0
  mixes nothing (FLOPs and reads only count layers 1..L-1): 2 * 117 + 48 = 282 vectors of d_kv -> 282 KiB; the
  strict count (47 writes) would print 281 KiB.
- AttnRes: the paper counts one aggregator per sublayer, s = 0 .. 2L-1, sublayer 0 with its single candidate (the
  embedding), and no aggregator before the final norm: 520 candidates at 3B -> 4.26e6 FLOPs, 4.44 MiB. Our model
  (docs/method.md#baselines) has no aggregator before sublayer 0 and one before the final norm (9 candidates at
  3B): 528 candidates -> 4.33e6 FLOPs, 4.50 MiB. The two agree in the number of aggregators (2L) and in every
  sublayer s >= 1.
"""

from __future__ import annotations

import dataclasses
import math

from ..config import DepthAttentionConfig
from ..methods import DESCRIPTIONS, FlopTerm
from ..presets import method_settings

DEFAULT_CONTEXT = 131072  # 128K, the paper's prefill length for the state column
DEFAULT_DTYPE_BYTES = 2  # bf16


def default_methods() -> list[str]:
    """The method presets (depthattn.presets) of the table's rows: vanilla, then every registered `cross_layer`
    in the order of registration (a method registered later has its row too)."""
    return list(DESCRIPTIONS)


# ----------------------------------------------------------------------------------------------------------------
# parameters


def _dims(config: DepthAttentionConfig) -> tuple[int, int, int, int]:
    """(hidden size, attention heads, KV heads, head_dim); the last two are None only until the config's __init__
    derives them."""
    return (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,  # type: ignore[return-value]
            config.head_dim)


def backbone_parameters(config: DepthAttentionConfig) -> int:
    """Parameters of the vanilla decoder with this backbone (tied embeddings counted once)."""
    D, heads, kv, d = _dims(config)
    attention = D * heads * d + 2 * D * kv * d + heads * d * D  # q, k, v, o projections
    attention += 2 * d if config.use_qk_norm else 0
    if config.attention_bias or config.qkv_bias:  # Qwen2's: q, k and v's biases, not o's
        attention += heads * d + 2 * kv * d + (D if config.attention_bias else 0)
    mlp = 3 * D * config.intermediate_size + (2 * config.intermediate_size + D if config.mlp_bias else 0)
    layer = attention + mlp + 2 * D  # input and post-attention norms
    embeddings = config.vocab_size * D * (1 if config.tie_word_embeddings else 2)
    return embeddings + config.num_hidden_layers * layer + D  # + final norm


def extra_parameters(config: DepthAttentionConfig) -> int:
    """Parameters of the cross-layer method (`count_parameters(model)["extra_over_vanilla"]`)."""
    return DESCRIPTIONS[config.cross_layer].extra_parameters(config)


def flop_terms(config: DepthAttentionConfig) -> list[FlopTerm]:
    """The extra arithmetic per token, term by term (see the module docstring for the conventions)."""
    return DESCRIPTIONS[config.cross_layer].flop_terms(config)


def io_elements(config: DepthAttentionConfig) -> dict[str, int]:
    """Extra activation elements read and written per token (paper convention; see the module docstring)."""
    return DESCRIPTIONS[config.cross_layer].io_elements(config)


def extra_state_elements(config: DepthAttentionConfig, context: int) -> int:
    """Elements held beyond the vanilla KV cache at the peak of a prefill of `context` tokens."""
    return DESCRIPTIONS[config.cross_layer].extra_state_elements(config, context)


def kv_cache_bytes_per_token(config: DepthAttentionConfig, dtype_bytes: int = DEFAULT_DTYPE_BYTES) -> int:
    """K and V of every unrolled step: 2 * L * Hkv * head_dim * bytes (the same for every method)."""
    _, _, kv, d = _dims(config)
    return 2 * config.unrolled_depth * kv * d * dtype_bytes


# ----------------------------------------------------------------------------------------------------------------
# records


def method_costs(config: DepthAttentionConfig, context: int = DEFAULT_CONTEXT,
                 dtype_bytes: int = DEFAULT_DTYPE_BYTES, name: str | None = None) -> dict:
    """Every cost of `config`'s cross-layer method, as a JSON-ready dict (see the module docstring)."""
    if context < 0 or dtype_bytes <= 0:
        raise ValueError(f"context must be >= 0 and dtype_bytes > 0, got {context} and {dtype_bytes}")
    terms = flop_terms(config)
    extra_params = extra_parameters(config)
    vanilla_params = backbone_parameters(config)
    flops = sum(t.flops for t in terms if t.paper)
    io = io_elements(config)
    kv = kv_cache_bytes_per_token(config, dtype_bytes)
    record = {
        "method": name or config.cross_layer,
        "cross_layer": config.cross_layer,
        "unrolled_depth": config.unrolled_depth,
        "context": context,
        "dtype_bytes": dtype_bytes,
        "params_total": vanilla_params + extra_params,
        "params_extra": extra_params,
        "extra_flops_per_token": flops,
        "extra_flops_fraction_of_2n": flops / (2 * vanilla_params),  # 2N: forward FLOPs of the vanilla model
        "model_flops_per_token": {
            "matmul": sum(t.flops for t in terms if t.model and t.op == "matmul"),
            "elementwise": sum(t.flops for t in terms if t.model and t.op == "elementwise"),
            "total": sum(t.flops for t in terms if t.model),
        },
        "flop_terms": [dataclasses.asdict(t) for t in terms],
        "extra_io_bytes_per_token": (io["read"] + io["write"]) * dtype_bytes,
        "extra_io_elements_per_token": io,
        "kv_cache_bytes_per_token": kv,
        "kv_cache_bytes_at_context": kv * context,
        "extra_state_bytes_at_context": extra_state_elements(config, context) * dtype_bytes,
    }
    record.update(DESCRIPTIONS[config.cross_layer].cost_details(config))
    return record


def method_configs(backbone: dict, methods=None, num_loops: int = 1,
                   overrides: dict | None = None) -> dict[str, DepthAttentionConfig]:
    """One config per method preset over a backbone (a `MODEL_PRESETS` entry plus config fields), as training
    builds it: backbone, then the preset's settings, then `overrides` (its `cross_layer`, if any, is ignored)."""
    overrides = {k: v for k, v in (overrides or {}).items() if k != "cross_layer"}
    methods = default_methods() if methods is None else methods
    configs = {}
    for name in methods:
        settings = dict(backbone)
        layers = overrides.get("num_hidden_layers", backbone["num_hidden_layers"])  # strides follow the built depth
        settings.update(method_settings(name, layers, num_loops))
        settings.update(overrides)
        configs[name] = DepthAttentionConfig(**settings)
    return configs


def costs_table(configs: dict[str, DepthAttentionConfig], context: int = DEFAULT_CONTEXT,
                dtype_bytes: int = DEFAULT_DTYPE_BYTES) -> list[dict]:
    return [method_costs(config, context, dtype_bytes, name=name) for name, config in configs.items()]


# ----------------------------------------------------------------------------------------------------------------
# formatting


def format_flops(value: float) -> str:
    """2.40e5 style (3 significant digits); 0 -> "0"."""
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_bytes(value: float, unit: str | None = None, digits: int = 3) -> str:
    """Binary units with `digits` significant digits (282 KiB, 4.97 MiB, 24.0 GiB); `unit` forces one."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    if unit is None:
        index = 0
        while index < len(units) - 1 and abs(value) >= 1024 ** (index + 1):
            index += 1
    else:
        index = units.index(unit)
    scaled = value / 1024 ** index
    if scaled == 0:
        return f"0 {units[index]}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(scaled)))))
    return f"{scaled:.{decimals}f} {units[index]}"


def format_table(records: list[dict]) -> str:
    """A markdown table of the records (one row per method)."""
    if not records:
        return ""
    context, dtype_bytes = records[0]["context"], records[0]["dtype_bytes"]
    header = ["method", "params", "extra params", "extra FLOPs/token", "of 2N", "extra act. I/O/token",
              "KV cache/token", f"extra state @ {context} tokens"]
    rows = []
    for r in records:
        rows.append([
            r["method"], f"{r['params_total'] / 1e6:.1f}M", f"{r['params_extra']:,}",
            format_flops(r["extra_flops_per_token"]), f"{100 * r['extra_flops_fraction_of_2n']:.3g}%",
            format_bytes(r["extra_io_bytes_per_token"]), format_bytes(r["kv_cache_bytes_per_token"]),
            format_bytes(r["extra_state_bytes_at_context"], unit="GiB"),
        ])
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    out.append(f"\n{dtype_bytes} bytes per element; FLOPs: multiply-add = 2; I/O: extra activations read + written "
               "per token; state: held beyond the KV cache at the peak of a prefill (see depthattn.evaluate.costs).")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------
# command line: `depthattn costs`
