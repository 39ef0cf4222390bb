"""Ratios, the speed goals, and the markdown table."""

from __future__ import annotations

from depthattn import DepthAttentionConfig

from .candidates import QWEN3, VANILLA
from .measure import paired_ratio

METHOD = DepthAttentionConfig.cross_layer  # the model's default method, whose speed goals these are

TIMED = {"train_step": "train_step_s", "prefill": "prefill_s", "decode_token": "decode_token_s"}
MEMORY = {"peak_train_memory": "peak_train_bytes", "peak_prefill_memory": "peak_prefill_bytes"}
# (name, numerator, denominator, measure, limit): the project's speed goals
GOALS = [
    ("Depth-Attention / vanilla, training step", METHOD, VANILLA, "train_step", 1.03),
    ("Depth-Attention / vanilla, decode per token", METHOD, VANILLA, "decode_token", 1.02),
    ("Depth-Attention / vanilla, prefill", METHOD, VANILLA, "prefill", 1.03),
    ("Depth-Attention / vanilla, peak training memory", METHOD, VANILLA, "peak_train_memory", 1.05),
    ("vanilla / Qwen3, training step", VANILLA, QWEN3, "train_step", 1.00),
    ("vanilla / Qwen3, decode per token", VANILLA, QWEN3, "decode_token", 1.00),
]


def ratio(results: dict, name: str, base: str, what: str) -> dict | None:
    a, b = results.get(name, {}), results.get(base, {})
    if what in TIMED:
        key = TIMED[what]
        if key in a and key in b:
            return paired_ratio(a[key]["samples"], b[key]["samples"])
        return None
    key = MEMORY[what]
    if a.get(key) and b.get(key):
        return {"median": a[key] / b[key]}
    return None


def ratios_and_goals(report: dict) -> dict:
    results = report["candidates"]
    measures = [*TIMED, *MEMORY]
    ratios = {name: {m: ratio(results, name, VANILLA, m) for m in measures} for name in results}
    vs_qwen3 = {m: ratio(results, VANILLA, QWEN3, m) for m in measures} if QWEN3 in results else None
    goals = []
    for label, name, base, what, limit in GOALS:
        r = ratio(results, name, base, what)
        if r is not None:
            goals.append({"goal": label, "ratio": r["median"], "p25": r.get("p25"), "p75": r.get("p75"),
                          "limit": limit, "met": r["median"] <= limit})
    return {"ratios_to_vanilla": ratios, "vanilla_to_qwen3": vs_qwen3, "goals": goals}


def _ms(stats: dict | None) -> str:
    if not stats or stats.get("median") is None:
        return "–"
    return f"{stats['median'] * 1e3:.4g} ({stats['p25'] * 1e3:.4g}–{stats['p75'] * 1e3:.4g})"


def _ratio(r: dict | None) -> str:
    if not r:
        return "–"
    if r.get("p25") is None:
        return f"{r['median']:.3f}"
    return f"{r['median']:.3f} ({r['p25']:.3f}–{r['p75']:.3f})"


def _mib(value) -> str:
    return f"{value / 2**20:.0f}" if value else "–"


def markdown(report: dict) -> str:
    m, size, work = report["machine"], report["size"], report["workload"]
    where = m.get("gpu") or m.get("cpu_model") or m["processor"]
    lines = [
        "# depthattn benchmark",
        "",
        f"Machine: {where}, {m['cpu_count']} CPU cores; torch {m['torch']} ({m['torch_threads']} threads), "
        f"transformers {m['transformers']}; device {m['device']}, {work['dtype']}.",
        f"Model: {size['num_hidden_layers']} layers, hidden {size['hidden_size']}, MLP {size['intermediate_size']}, "
        f"heads {size['num_attention_heads']}/{size['num_key_value_heads']}, vocab {size['vocab_size']}. "
        f"Training and prefill: batch {work['batch']} x {work['seq']} tokens; decode: batch {work['decode_batch']}, "
        f"context {work['context']}, {work['decode_tokens']} tokens per repetition."
        + (f" Training and decoding steps run torch.compile'd models (backend {work['compile']}; decoding into a "
           "StaticCache); prefill is eager."
           if work.get("compile") else ""),
        f"Timing: {report['timing_method']}."
        + (f" Load average (1/5/15 min) at start {m['load_average_at_start']}, at end {m['load_average_at_end']}."
           if "load_average_at_end" in m else ""),
        f"Memory: {report['memory_method']}.",
        "",
        "Times are medians (quartiles) in ms; ratios are to vanilla.",
        "",
    ]
    gpu = any("mfu" in r for r in report["candidates"].values())
    head = ["candidate", "params (M)", "train step ms", "× vanilla", "prefill ms", "× vanilla",
            "decode ms/token", "× vanilla", "peak train MiB", "× vanilla", "train tok/s", "decode tok/s"]
    if gpu:
        head.append("MFU")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in report["candidates"].items():
        q = report["ratios_to_vanilla"][name]
        tps = r.get("tokens_per_s", {})
        row = [name, f"{r['parameters'] / 1e6:.2f}", _ms(r.get("train_step_s")), _ratio(q["train_step"]),
               _ms(r.get("prefill_s")), _ratio(q["prefill"]), _ms(r.get("decode_token_s")),
               _ratio(q["decode_token"]), _mib(r.get("peak_train_bytes")), _ratio(q["peak_train_memory"]),
               f"{tps['train_step']:.0f}" if "train_step" in tps else "–",
               f"{tps['decode_token']:.1f}" if "decode_token" in tps else "–"]
        if gpu:
            row.append(f"{100 * r['mfu']:.1f}%" if "mfu" in r else "–")
        lines.append("| " + " | ".join(row) + " |")
    vq = report.get("vanilla_to_qwen3")
    if vq:
        lines += ["", "Our vanilla / transformers' Qwen3ForCausalLM (same weights): "
                  + ", ".join(f"{k.replace('_', ' ')} {_ratio(v)}" for k, v in vq.items() if v) + "."]
    if report["goals"]:
        lines += ["", "| goal | ratio (quartiles) | limit | met |", "|---|---|---|---|"]
        for g in report["goals"]:
            spread = f" ({g['p25']:.3f}–{g['p75']:.3f})" if g.get("p25") is not None else ""
            lines.append(f"| {g['goal']} | {g['ratio']:.3f}{spread} | <= {g['limit']:.2f} | "
                         f"{'yes' if g['met'] else 'no'} |")
    return "\n".join(lines) + "\n"
