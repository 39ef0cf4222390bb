"""`python -m benchmarks.profile_decode`: where a decoding step's time goes, per candidate, from `torch.profiler`.

Takes the benchmark's size and candidate options (`python -m benchmarks --help`; `--phases` is ignored). Each
candidate fills its cache with `--context` tokens, decodes a few untimed steps, then `--decode-tokens` steps under
the profiler (CPU and, on a GPU, CUDA activity, with shapes). Written to `--out`:

* `profile.md`: per candidate, the step's wall time (with the profiler's own overhead), the device's busy time,
  the launches, host-device copies and synchronisations per step, and the top operators by self CPU and by self
  device time; then, per candidate, the operators whose self CPU time per step differs most from vanilla's:
  where its extra time goes.
* `profile.json`: the same numbers; `trace-NAME.json.gz`: each candidate's Chrome trace (chrome://tracing,
  https://ui.perfetto.dev).

First, one depth-mixing call alone at the model's decoding shape (the paper's stride: two sources and the layer
itself), per implementation, and on a GPU the Triton path's parts one by one (its pointer tables, its scale
tensor, its outputs, the bare kernel launch): host time per call, synchronised once per block of calls, next to
one plain elementwise op, the unit of eager overhead.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from depthattn import DepthAttentionConfig
from depthattn.files import atomic_write_bytes, atomic_write_json
from depthattn.layer_states import DepthState
from depthattn.ops import depth_mix_compiled, depth_mix_reference, depth_mix_triton, triton_runs_on

from . import candidates as cand
from .bench import Bench, machine_info, parse_args, resolve

ROWS = 25
# runtime calls counted per step (CUDA runtime and driver API names as the profiler reports them)
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
COPIES = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemsetAsync")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
HOST_ALLOCS = ("cudaHostAlloc", "cudaMallocHost", "cudaMalloc", "cudaFree", "cudaFreeHost")


def _device_time(event) -> float:
    """An averaged event's self time on the device in microseconds (torch renamed cuda to device in 2.4)."""
    return getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0))


def _per_call_us(fn, device: torch.device, calls: int = 200, blocks: int = 5) -> float:
    """Median over `blocks` of the host time per call of `fn`, `calls` calls a block, synchronised per block."""
    for _ in range(20):
        fn()
    times = []
    for _ in range(blocks):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(times)[len(times) // 2]


def mix_costs(size: dict, work: dict, device: torch.device, dtype: torch.dtype, sources: int = 2) -> dict:
    """Microseconds per depth-mixing call at the decoding shape (need_weights=False, as generation runs)."""
    heads, kv_heads = size["num_attention_heads"], size["num_key_value_heads"]
    head_dim, batch = size["hidden_size"] // heads, work["decode_batch"]

    def projected(h):  # (B, H, 1, d), a view of the projection's (B, 1, H, d) layout, as in the model
        return torch.randn(batch, 1, h, head_dim, device=device, dtype=dtype).transpose(1, 2)

    query = projected(heads)
    states = [DepthState(k, k, projected(kv_heads)) for k in (projected(kv_heads) for _ in range(sources + 1))]
    *srcs, own = states
    scaling = head_dim ** -0.5
    a, b = own.value, srcs[0].value
    costs = {"one elementwise op (add)": _per_call_us(lambda: torch.add(a, b), device)}
    impls = {"reference": depth_mix_reference, "compiled": depth_mix_compiled}
    if triton_runs_on(device):
        impls["triton"] = depth_mix_triton
    for name, fn in list(impls.items()):
        try:
            costs[f"depth_mix {name}"] = _per_call_us(
                lambda fn=fn: fn(query, own, srcs, scaling, need_weights=False), device)
        except Exception as e:
            print(f"  depth_mix {name} could not be timed: {e!r}", file=sys.stderr)
            impls.pop(name)
    if "triton" in impls:
        try:
            costs.update(_triton_parts(query, states, scaling, device))
        except Exception as e:  # the parts are a diagnosis: the profile goes on without them
            print(f"  the Triton path's parts could not be timed: {e!r}", file=sys.stderr)
    return costs


def _triton_parts(query, states, scaling, device) -> dict:
    """The Triton path's steps one at a time (ops/depth_mix/triton.py), to see which of them costs the time."""
    from depthattn.ops.depth_mix import triton as tri

    batch, heads, seq_len, head_dim = query.shape
    kv_heads, n = states[0].score_key.shape[1], len(states)
    keys = [s.score_key for s in states]
    values = [s.value for s in states]
    groups = [keys, keys, values]
    acc = torch.float32
    tables = tri._tables(groups, device)
    out = torch.empty((batch, kv_heads, seq_len, head_dim), device=device, dtype=query.dtype)
    weights = torch.empty((batch, kv_heads, seq_len, n), device=device, dtype=acc)
    scale = torch.full((1,), scaling / (heads // kv_heads), device=device, dtype=acc)
    block_d, block_t, warps, blocks = tri._launch_config(seq_len, head_dim)
    forward_kernel, _, tl_dtypes = tri._kernels()

    def launch():
        forward_kernel[(blocks, batch * kv_heads)](
            query, *[query.stride(i) for i in range(3)], *tables, weights, out, weights, n, seq_len, kv_heads,
            scale, G=heads // kv_heads, D=head_dim, BLOCK_D=block_d, BLOCK_T=block_t, SOFTMAX=True, MIX_K=False,
            MIX_V=True, ACC=tl_dtypes[acc], **tri._element_types(keys, [], values, tl_dtypes), num_warps=warps)

    meta = (float(scaling), True, False, True, n)
    return {
        "triton: pointer tables (host tensor, pinned, copied)": _per_call_us(lambda: tri._tables(groups, device),
                                                                             device),
        "triton: scale tensor (torch.full on the device)": _per_call_us(
            lambda: torch.full((1,), 0.5, device=device, dtype=acc), device),
        "triton: output tensors (2 x torch.empty)": _per_call_us(
            lambda: (torch.empty_like(out), torch.empty_like(weights)), device),
        "triton: bare kernel launch": _per_call_us(launch, device),
        "triton: autograd.Function.apply, all of it": _per_call_us(
            lambda: tri._DepthMixFunction.apply(meta, query, *keys, *values), device),
    }


def profile_candidate(bench: Bench, c: cand.Candidate, steps: int, trace: Path | None) -> dict:
    bench.decode_setup(c)
    token = c.decode_token
    for _ in range(steps):  # the same steps untimed first: every cache length seen once (cuDNN plans one per length)
        token = bench.decode_step(c, token)
    with torch.inference_mode():
        c.decode_cache.crop(-steps)
    token = c.decode_token
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.device.type == "cuda" else [])
    if bench.device.type == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=True) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            token = bench.decode_step(c, token)
        if bench.device.type == "cuda":
            torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps
    c.decode_cache = c.decode_token = None
    if trace is not None:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            with open(raw, "rb") as f, gzip.open(trace, "wb") as out:
                shutil.copyfileobj(f, out)
    events = prof.key_averages()
    per_op = {e.key: {"count": e.count / steps, "self_cpu_us": e.self_cpu_time_total / steps,
                      "self_device_us": _device_time(e) / steps} for e in events}

    def count(names):
        return sum(per_op[n]["count"] for n in names if n in per_op)

    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {
        "step_wall_ms": wall * 1e3,
        "device_busy_ms": sum(e.time_range.elapsed_us() for e in kernels) / steps / 1e3,
        "kernels": len(kernels) / steps,
        "launches": count(LAUNCHES), "copies": count(COPIES), "syncs": count(SYNCS),
        "host_allocs": count(HOST_ALLOCS),
        "self_cpu_ms": sum(v["self_cpu_us"] for v in per_op.values()) / 1e3,
        "ops": per_op,
        "table_cpu": events.table(sort_by="self_cpu_time_total", row_limit=ROWS, max_name_column_width=60),
        "table_device": events.table(sort_by="self_cuda_time_total", row_limit=ROWS, max_name_column_width=60)
        if bench.device.type == "cuda" else "",
    }


def difference(result: dict, baseline: dict, rows: int = ROWS) -> list[tuple[str, float, float, float]]:
    """(op, calls per step, self CPU us per step, self device us per step) of `result` minus `baseline`, the
    largest CPU differences first."""
    names = set(result["ops"]) | set(baseline["ops"])
    zero = {"count": 0.0, "self_cpu_us": 0.0, "self_device_us": 0.0}
    diffs = []
    for name in names:
        a, b = result["ops"].get(name, zero), baseline["ops"].get(name, zero)
        diffs.append((name, a["count"] - b["count"], a["self_cpu_us"] - b["self_cpu_us"],
                      a["self_device_us"] - b["self_device_us"]))
    return sorted(diffs, key=lambda d: -abs(d[2]))[:rows]


def markdown(results: dict, costs: dict, info: dict, size: dict, work: dict, steps: int) -> str:
    lines = ["# depthattn decoding profile", "",
             f"Machine: {info.get('gpu') or info.get('cpu_model') or info['processor']}, {info['cpu_count']} CPU "
             f"cores; torch {info['torch']}, transformers {info['transformers']}; {work['dtype']}.",
             f"Model: {size['num_hidden_layers']} layers, hidden {size['hidden_size']}, MLP "
             f"{size['intermediate_size']}, heads {size['num_attention_heads']}/{size['num_key_value_heads']}. "
             f"Decoding at batch {work['decode_batch']}, context {work['context']}, eager; {steps} untimed "
             f"steps, the cache cropped back, then the same {steps} profiled (torch.profiler, record_shapes). "
             "Per step; the wall time includes the profiler's own overhead; 'outside ops' is the wall time not "
             "inside any operator (Python, the model's own code).", "",
             "One depth-mixing call alone at this shape (two sources and the layer itself, no weights), host "
             "time per call:", "", "| call | us |", "|---|---|",
             *[f"| {name} | {us:.1f} |" for name, us in costs.items()], "",
             "| candidate | step ms (profiled) | device busy ms | kernels | launches | copies | syncs | host/device "
             "allocs | self CPU ms | outside ops ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['step_wall_ms']:.2f} | {r['device_busy_ms']:.2f} | {r['kernels']:.0f} | "
                     f"{r['launches']:.0f} | {r['copies']:.0f} | {r['syncs']:.0f} | {r['host_allocs']:.0f} | "
                     f"{r['self_cpu_ms']:.2f} | {r['step_wall_ms'] - r['self_cpu_ms']:.2f} |")
    baseline = results.get("vanilla")
    for name, r in results.items():
        if baseline is not None and r is not baseline:
            lines += ["", f"## {name} minus vanilla, per step (largest self-CPU differences)", "",
                      "| op | calls | self CPU us | self device us |", "|---|---|---|---|"]
            lines += [f"| `{op}` | {calls:+.0f} | {cpu:+.0f} | {dev:+.0f} |"
                      for op, calls, cpu, dev in difference(r, baseline)]
    for name, r in results.items():
        lines += ["", f"## {name}: top operators by self CPU time ({steps} steps)", "", "```", r["table_cpu"], "```"]
        if r["table_device"]:
            lines += ["", f"## {name}: top operators by self device time", "", "```", r["table_device"], "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    size, work = resolve(args)
    device, dtype = torch.device(work["device"]), getattr(torch, work["dtype"])
    torch.set_num_threads(work["threads"])
    names = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods != "all" else \
        ["vanilla", DepthAttentionConfig.cross_layer]  # the default method
    for name in names:
        cand.parse_candidate(name, work["method_fields"])
    if "vanilla" not in names:
        names.insert(0, "vanilla")  # differences are to vanilla
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    info = machine_info(device)
    costs = mix_costs(size, work, device, dtype)
    for name, us in costs.items():
        log(f"  {name}: {us:.1f} us a call")
    cands = cand.build(names, size, work["method_fields"], device, dtype, seed=args.seed, log=log)
    bench = Bench(cands, size, work, device, log)
    steps = work["decode_tokens"]
    results = {}
    for c in cands:
        results[c.name] = profile_candidate(bench, c, steps, out / f"trace-{c.name.replace(':', '-')}.json.gz")
        r = results[c.name]
        log(f"  {c.name}: {r['step_wall_ms']:.2f} ms a step (profiled), {r['launches']:.0f} launches, "
            f"{r['copies']:.0f} copies, {r['syncs']:.0f} syncs")
    text = markdown(results, costs, info, size, work, steps)
    atomic_write_bytes(out / "profile.md", text.encode())
    tables_left_out = {name: {k: v for k, v in r.items() if not k.startswith("table")} for name, r in results.items()}
    atomic_write_json(out / "profile.json", {"machine": info, "size": size, "work": work, "steps": steps,
                                             "mix_costs_us": costs, "results": tables_left_out})
    sections = text.split("\n## ")
    print("\n## ".join([sections[0], *(s for s in sections[1:] if "minus vanilla" in s)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
