"""Analytic costs of every cross-layer method over a vanilla decoder with the same backbone (SPEC §5, Table 2).

`method_costs(config, context, dtype_bytes)` gives, for one `DepthAttentionConfig`: parameters (total and extra
over vanilla), extra FLOPs per token, extra activation I/O per token, KV-cache bytes per token and the extra state
held at a context (prefill) of `context` tokens. `depthattn costs --preset 3b` prints the paper's Table 2.

Conventions (the paper's; with them its 3B numbers are reproduced to the printed precision, see `PAPER_TABLE_3B`):

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
  (the per-token state of SPEC §4 times T). KV cache per token: `2 * L * Hkv * head_dim * dtype_bytes`; every
  method has vanilla's cache (Depth-Attention and value residual store the mixed value in the value slot).

Two places where the paper's accounting is not the literal operation count of our implementation (both kept so
that Table 2 is reproduced; `model_flops` in each record is the literal count of what the model runs):

- Depth-Attention I/O counts one mixed-value write for each of the L layers, layer 0 included although layer 0
  mixes nothing (FLOPs and reads only count layers 1..L-1): 2 * 117 + 48 = 282 vectors of d_kv -> 282 KiB; the
  strict count (47 writes) would print 281 KiB.
- AttnRes: the paper counts one aggregator per sublayer, s = 0 .. 2L-1, sublayer 0 with its single candidate (the
  embedding), and no aggregator before the final norm: 520 candidates at 3B -> 4.26e6 FLOPs, 4.44 MiB. Our model
  (SPEC §4) has no aggregator before sublayer 0 and one before the final norm (9 candidates at 3B): 528 candidates
  -> 4.33e6 FLOPs, 4.50 MiB. The two agree in the number of aggregators (2L) and in every sublayer s >= 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

from ..config import CROSS_LAYER_METHODS, DepthAttentionConfig
from ..depth import depth_sources

DEFAULT_CONTEXT = 131072  # 128K, the paper's prefill length for the state column
DEFAULT_DTYPE_BYTES = 2  # bf16

# The method presets (depthattn.presets) of the table's rows, one per `cross_layer`, vanilla first.
DEFAULT_METHODS = ("vanilla", "depth_attention", "value_residual", "denseformer", "attnres", "mhc",
                   "hyper_connections")
assert {name if name != "vanilla" else "none" for name in DEFAULT_METHODS} == set(CROSS_LAYER_METHODS)

# SPEC §5 / the paper's Table 2: (extra FLOPs/token, extra I/O/token, extra state at a 128K prefill), 3B config.
PAPER_TABLE_3B = {
    "depth_attention": ("2.40e5", "282 KiB", "0 GiB"),
    "denseformer": ("5.01e6", "4.97 MiB", "24.0 GiB"),
    "attnres": ("4.26e6", "4.44 MiB", "4.0 GiB"),
    "mhc": ("4.72e7", "8.63 MiB", "1.5 GiB"),
}


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


# ----------------------------------------------------------------------------------------------------------------
# parameters


def backbone_parameters(config: DepthAttentionConfig) -> int:
    """Parameters of the vanilla decoder with this backbone (tied embeddings counted once)."""
    D, heads, kv, d = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    attention = D * heads * d + 2 * D * kv * d + heads * d * D + 2 * d  # q, k, v, o projections; q/k norms
    if config.attention_bias:
        attention += heads * d + 2 * kv * d + D
    mlp = 3 * D * config.intermediate_size
    layer = attention + mlp + 2 * D  # input and post-attention norms
    embeddings = config.vocab_size * D * (1 if config.tie_word_embeddings else 2)
    return embeddings + config.num_hidden_layers * layer + D  # + final norm


def extra_parameters(config: DepthAttentionConfig) -> int:
    """Parameters of the cross-layer method (`count_parameters(model)["extra_over_vanilla"]`)."""
    method, L, D = config.cross_layer, config.unrolled_depth, config.hidden_size
    S = 2 * L  # sublayers
    if method in ("none", "depth_attention"):
        return 0  # Depth-Attention reuses the layer's own q, k, v
    if method == "value_residual":
        return 2 * max(L - 1, 0)  # lambda_1, lambda_2 per step u >= 1
    if method == "denseformer":
        return sum(len(sources) for sources in _denseformer_dwas(config).values())  # L(L+3)/2 at k = p = 1
    if method == "attnres":
        return S * (2 * D + 1)  # per aggregator: pseudo-query w, RMSNorm gain, recency bias
    if method == "mhc":
        n = config.mhc_streams
        return S * ((2 * n + n * n) * (n * D + 1) + 3) + n  # phi, its biases, 3 alphas; n final logits
    if method == "hyper_connections":
        n = config.hc_streams
        return S * (D * (3 + n) + 2 + 2 * n + n * n)  # gain, w_m, w_b, W_r; 2 scales, A_m, B, A_r static
    raise ValueError(f"unknown cross_layer {method!r}")


# ----------------------------------------------------------------------------------------------------------------
# structure helpers


def depth_source_lists(config: DepthAttentionConfig) -> list[list[int]]:
    """S(u) for every unrolled step u (empty unless Depth-Attention), as the model chooses them."""
    if config.cross_layer != "depth_attention":
        return [[] for _ in range(config.unrolled_depth)]
    return [depth_sources(u, config.resolved_depth_stride, config.depth_window) for u in range(config.unrolled_depth)]


def _denseformer_dwas(config: DepthAttentionConfig) -> dict[int, list[int]]:
    """Block i (1-based) -> the outputs m its DWA averages (X_0 the embedding), for blocks followed by a DWA."""
    k, p = config.denseformer_dilation, config.denseformer_period
    return {i: list(range(i % k, i + 1, k)) for i in range(1, config.unrolled_depth + 1) if i % p == 0}


def _denseformer_live_outputs(config: DepthAttentionConfig) -> int:
    """Peak number of earlier block outputs X_m (m < i) still needed by a DWA at or after block i."""
    dwas = _denseformer_dwas(config)
    last_use: dict[int, int] = {}
    for block, sources in dwas.items():
        for m in sources:
            last_use[m] = max(last_use.get(m, 0), block)
    return max((sum(1 for m, last in last_use.items() if m < i <= last) for i in dwas), default=0)


def attnres_candidates(config: DepthAttentionConfig, sublayer: int) -> int:
    """Candidates the aggregator before `sublayer` (2L: the final one) reads in our model: snapshots taken before
    it (the embedding and the running stream at each earlier block end) plus the running stream."""
    B = config.attnres_block_size
    return (sublayer - 1) // B + 2 if sublayer >= 1 else 1


def attnres_snapshots(config: DepthAttentionConfig) -> int:
    """Snapshots held at the end of a pass: the embedding and the stream at every block end but the last."""
    return (2 * config.unrolled_depth - 1) // config.attnres_block_size + 1


# ----------------------------------------------------------------------------------------------------------------
# FLOPs


def flop_terms(config: DepthAttentionConfig) -> list[FlopTerm]:
    """The extra arithmetic per token, term by term (see the module docstring for the conventions)."""
    method, L, D = config.cross_layer, config.unrolled_depth, config.hidden_size
    d_kv = config.num_key_value_heads * config.head_dim
    S = 2 * L
    if method == "none":
        return []
    if method == "depth_attention":
        # per step u with sources: n = |S(u)| + 1 candidates (sources and itself), all at KV-head resolution
        candidates = sum(len(s) + 1 for s in depth_source_lists(config) if s)
        mixed = len(config.depth_mix_states)  # "v", "k": 1 state mixed; "kv": 2
        terms = [FlopTerm("depth mix: weighted sums of the candidates' states, 2 n d_kv per mixed state",
                          2 * candidates * d_kv * mixed, "elementwise")]
        if config.depth_mix == "softmax":  # uniform weights need no scores
            terms.insert(0, FlopTerm("depth scores: group-mean query . candidate keys, 2 n d_kv",
                                     2 * candidates * d_kv, "elementwise", "weights"))
        return terms
    if method == "value_residual":
        # V' = lambda_1 V_0 + lambda_2 V: a weighted sum of 2 vectors, 2 * 2 d_kv (the model's ops: 2 mul + 1 add)
        return [FlopTerm("value mix lambda_1 V_0 + lambda_2 V_u, u >= 1", 4 * d_kv * max(L - 1, 0), "elementwise")]
    if method == "denseformer":
        # DWA after block i: Y_i = sum_m alpha_{i,m} X_m over its sources; L(L+3)/2 * 2D at k = p = 1
        terms = sum(len(sources) for sources in _denseformer_dwas(config).values())
        return [FlopTerm("depth-weighted averages, 2 D per averaged output", 2 * D * terms, "matmul")]
    if method == "attnres":
        # an aggregator over n candidates: logits <w*g, x>/rms(x) (2 n D) and the mixture (2 n D)
        inner = sum(attnres_candidates(config, s) for s in range(1, S))  # sublayers 1 .. 2L-1
        final = attnres_candidates(config, S)
        return [
            FlopTerm("aggregator logits, sublayers 1..2L-1", 2 * D * inner, "matmul", "weights"),
            FlopTerm("aggregator mixtures, sublayers 1..2L-1", 2 * D * inner, "elementwise"),
            FlopTerm("aggregator before sublayer 0 (1 candidate): counted by the paper only", 4 * D, "elementwise",
                     "mix", model=False),
            FlopTerm("final aggregator logits (before the final norm): in our model only", 2 * D * final, "matmul",
                     "weights", paper=False),
            FlopTerm("final aggregator mixture: in our model only", 2 * D * final, "elementwise", paper=False),
        ]
    if method in ("mhc", "hyper_connections"):
        n = config.mhc_streams if method == "mhc" else config.hc_streams
        if method == "mhc":  # one projection phi: nD -> 2n + n^2 (pre, post, res logits)
            coefficients = FlopTerm("coefficient projection phi (nD -> 2n + n^2) per sublayer",
                                    S * 2 * n * D * (2 * n + n * n), "matmul", "weights")
        else:  # w_m, w_b (nD each: D per stream) and W_r (D -> n per stream)
            coefficients = FlopTerm("coefficient projections w_m, w_b, W_r per sublayer",
                                    S * 2 * n * D * (n + 2), "matmul", "weights")
        terms = [
            coefficients,
            FlopTerm("pre: sublayer input sum_i pre_i x_i (2 n D) per sublayer", S * 2 * n * D, "elementwise"),
            FlopTerm("res: stream mix res @ x (2 n^2 D) per sublayer", S * 2 * n * n * D, "matmul"),
            FlopTerm("post: streams += post_i * out (2 n D) per sublayer", S * 2 * n * D, "elementwise"),
        ]
        if method == "mhc":
            terms.append(FlopTerm("final softmax-weighted mean of the streams: in our model only", 2 * n * D,
                                  "elementwise", paper=False))
        else:
            terms.append(FlopTerm("final sum of the streams: in our model only", n * D, "elementwise", paper=False))
        return terms
    raise ValueError(f"unknown cross_layer {method!r}")


# ----------------------------------------------------------------------------------------------------------------
# activation I/O and state


def io_elements(config: DepthAttentionConfig) -> dict[str, int]:
    """Extra activation elements read and written per token (paper convention; see the module docstring)."""
    method, L, D = config.cross_layer, config.unrolled_depth, config.hidden_size
    d_kv = config.num_key_value_heads * config.head_dim
    S = 2 * L
    if method == "none":
        return {"read": 0, "write": 0}
    if method == "depth_attention":
        sources = depth_source_lists(config)
        candidates = sum(len(s) + 1 for s in sources if s)
        mixed = len(config.depth_mix_states)
        passes = mixed + (config.depth_mix == "softmax")  # the score keys, then each mixed state
        writes = mixed * L if candidates else 0  # one mixed state per layer, all L layers as the paper counts
        return {"read": passes * candidates * d_kv, "write": writes * d_kv}
    if method == "value_residual":
        # like Depth-Attention with uniform weights and layer 0 as the only source: read V_0 and V_u, write V'_u
        return {"read": 2 * max(L - 1, 0) * d_kv, "write": (L if L > 1 else 0) * d_kv}
    if method == "denseformer":
        dwas = _denseformer_dwas(config)
        return {"read": D * sum(len(s) for s in dwas.values()), "write": D * len(dwas)}
    if method == "attnres":
        # paper convention: aggregators before sublayers 0 .. 2L-1 (see the module docstring); each reads its
        # candidates twice (logits pass, mixture pass) and writes the mixture
        candidates = sum(attnres_candidates(config, s) for s in range(S))
        return {"read": 2 * D * candidates, "write": D * S}
    if method in ("mhc", "hyper_connections"):
        n = config.mhc_streams if method == "mhc" else config.hc_streams
        coefficients = 2 * n + n * n
        # per sublayer, D-vectors: coefficients read the n streams; pre reads n, writes 1; res reads n, writes n;
        # post + merge reads the n mixed streams and the output, writes n. Minus vanilla's residual add (reads
        # x and out, writes x). Coefficient scalars are written by their projection and read back.
        read = (4 * n + 1 - 2) * D + coefficients
        write = (2 * n + 1 - 1) * D + coefficients
        return {"read": S * read, "write": S * write}
    raise ValueError(f"unknown cross_layer {method!r}")


def extra_state_elements(config: DepthAttentionConfig, context: int) -> int:
    """Elements held beyond the vanilla KV cache at the peak of a prefill of `context` tokens."""
    method, D = config.cross_layer, config.hidden_size
    d_kv = config.num_key_value_heads * config.head_dim
    if method in ("none", "value_residual"):
        return 0  # value residual: V_0 of every position is what KV-cache slot 0 holds
    if method == "depth_attention":
        # source states (k_j, vmix_j at every position) are what KV-cache slot j holds: nothing extra. When keys
        # are mixed, a mixed source j >= 1 also needs its plain key (the score key), not in the cache.
        if "k" not in config.depth_mix_states:
            return 0
        sources = depth_source_lists(config)
        read_later = {j for s in sources for j in s}
        return sum(1 for j in read_later if sources[j]) * context * d_kv
    if method == "denseformer":
        return _denseformer_live_outputs(config) * context * D  # every earlier block output, L at k = p = 1
    if method == "attnres":
        return attnres_snapshots(config) * context * D  # one snapshot of the stream per block
    if method == "mhc":
        return (config.mhc_streams - 1) * context * D  # n - 1 extra residual streams
    if method == "hyper_connections":
        return (config.hc_streams - 1) * context * D
    raise ValueError(f"unknown cross_layer {method!r}")


def kv_cache_bytes_per_token(config: DepthAttentionConfig, dtype_bytes: int = DEFAULT_DTYPE_BYTES) -> int:
    """K and V of every unrolled step: 2 * L * Hkv * head_dim * bytes (the same for every method)."""
    return 2 * config.unrolled_depth * config.num_key_value_heads * config.head_dim * dtype_bytes


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
    if config.cross_layer == "depth_attention":
        sources = depth_source_lists(config)
        record["depth_sources_total"] = sum(len(s) for s in sources)  # sum |S(u)|: 70 at 3B
        record["depth_candidates_total"] = sum(len(s) + 1 for s in sources if s)  # sum (|S(u)| + 1): 117 at 3B
    return record


def method_configs(backbone: dict, methods=DEFAULT_METHODS, num_loops: int = 1,
                   overrides: dict | None = None) -> dict[str, DepthAttentionConfig]:
    """One config per method preset over a backbone (a `MODEL_PRESETS` entry plus config fields), as training
    builds it: backbone, then the preset's settings, then `overrides` (its `cross_layer`, if any, is ignored)."""
    from ..presets import method_settings

    overrides = {k: v for k, v in (overrides or {}).items() if k != "cross_layer"}
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
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    out.append(f"\n{dtype_bytes} bytes per element; FLOPs: multiply-add = 2; I/O: extra activations read + written "
               "per token; state: held beyond the KV cache at the peak of a prefill (see depthattn.evaluate.costs).")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------
# command line: `depthattn costs`


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="a TOML training config (configs/*.toml): its model preset, loops, overrides")
    source.add_argument("--preset", help="a model preset of depthattn.train.MODEL_PRESETS, e.g. 3b (default)")
    parser.add_argument("--num-loops", type=int, default=None, help="looped model (with --preset; default 1)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="vocabulary size (default: the config's override, else 50304, the paper's)")
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT,
                        help="prefill length for the extra-state column (default %(default)s)")
    parser.add_argument("--dtype-bytes", type=int, default=DEFAULT_DTYPE_BYTES,
                        help="bytes per activation element (default %(default)s: bf16)")
    parser.add_argument("--methods", default=None,
                        help="comma-separated method presets (default: vanilla and every cross_layer method, plus "
                             "the config's own method)")
    parser.add_argument("--out", help="also write the records to this JSON file")
    return parser


def configs_from_args(args) -> dict[str, DepthAttentionConfig]:
    from ..presets import PRESETS
    from ..train import MODEL_PRESETS, TrainConfig

    overrides, own_method = {}, None
    if args.config is not None:
        cfg = TrainConfig.load(args.config)
        preset, num_loops = cfg.model.preset, cfg.model.num_loops
        overrides = dict(cfg.model.overrides)
        overrides.setdefault("max_position_embeddings", cfg.model.max_position_embeddings)
        own_method = cfg.model.method
        if args.num_loops is not None:
            num_loops = args.num_loops
    else:
        preset, num_loops = args.preset or "3b", 1 if args.num_loops is None else args.num_loops
        if preset not in MODEL_PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(map(repr, MODEL_PRESETS))}; got {preset!r}")
    if num_loops < 1:
        raise ValueError(f"--num-loops must be >= 1, got {num_loops}")
    if args.vocab_size is not None:
        overrides["vocab_size"] = args.vocab_size
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    else:
        methods = list(DEFAULT_METHODS) + ([own_method] if own_method and own_method not in DEFAULT_METHODS else [])
    unknown = [m for m in methods if m not in PRESETS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(map(repr, unknown))}; choose among {', '.join(PRESETS)}")
    return method_configs(MODEL_PRESETS[preset], methods, num_loops, overrides)


def run(args) -> int:
    if args.context < 0 or args.dtype_bytes <= 0:
        raise ValueError(f"--context must be >= 0 and --dtype-bytes > 0, got {args.context} and {args.dtype_bytes}")
    records = costs_table(configs_from_args(args), args.context, args.dtype_bytes)
    print(format_table(records))
    if args.out:
        from ..data.files import atomic_write_json

        atomic_write_json(args.out, records)
        print(f"wrote {args.out}")
    return 0
