"""`python -m benchmarks`: training step, prefill, decode per token and peak memory of every candidate, measured
in one process with the candidates interleaved (rotating order; decoding alternates every step) so that machine
drift cancels; ratios to vanilla are medians of paired ratios (per repetition; decoding: per step). Writes
JSON and a markdown table."""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

from depthattn.files import atomic_write_bytes, atomic_write_json
from depthattn.loading import parse_method_fields
from depthattn.ops import TRITON_AVAILABLE

from . import candidates as cand
from . import measure
from .report import markdown, ratios_and_goals

# The benchmark size: 12 layers, hidden 512, GQA 8/2 (head dim 64), sequence 512; the vocabulary is the paper's
# (the paper's 50304), the MLP width 3 x hidden (the goals fix neither)
DEFAULT_SIZE = dict(num_hidden_layers=12, hidden_size=512, intermediate_size=1536, num_attention_heads=8,
                    num_key_value_heads=2, vocab_size=50304)
QUICK_SIZE = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256)
PHASES = ("train", "prefill", "decode", "memory")
PREFILL_REPS_PER_REP = 4  # prefill repetitions per --reps
# dense bf16 peak TFLOP/s by device name, for model FLOPs utilisation (pass --peak-tflops for others)
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a tiny model and few repetitions (smoke runs, tests)")
    p.add_argument("--methods", default="all",
                   help="comma-separated candidates: qwen3 and any method preset (every cross_layer method is one), "
                        "PRESET:VALUE for one whose method computes with VALUE in its switchable field; 'all' "
                        "(default) = "
                        + ",".join(cand.all_candidates({})))
    p.add_argument("--method-field", action="append", default=[], metavar="NAME=VALUE",
                   help="a field that a method switches (how it computes, not what; e.g. its kernels), for every "
                        "candidate of that method without a ':VALUE' (repeatable; default: the config's)")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    size = p.add_argument_group("model size (defaults: 12 x 512, GQA 8/2)")
    size.add_argument("--layers", type=int)
    size.add_argument("--hidden", type=int)
    size.add_argument("--intermediate", type=int)
    size.add_argument("--heads", type=int)
    size.add_argument("--kv-heads", type=int)
    size.add_argument("--vocab", type=int)
    run = p.add_argument_group("workload")
    run.add_argument("--seq", type=int, help="training / prefill sequence length (default 512; quick 32)")
    run.add_argument("--batch", type=int, default=1, help="training / prefill batch size (default 1)")
    run.add_argument("--context", type=int, help="tokens in the cache while decoding (default: --seq)")
    run.add_argument("--decode-batch", type=int, default=1)
    run.add_argument("--decode-tokens", type=int, help="tokens decoded per repetition (default 32; quick 4)")
    run.add_argument("--reps", type=int, help="timed repetitions per phase (default 10; quick 2; prefill 4x)")
    run.add_argument("--warmup", type=int, help="untimed repetitions first (default 2; quick 1)")
    run.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    run.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                     help="default float32 on CPU, bfloat16 on GPU")
    run.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads (default: all)")
    run.add_argument("--clock", choices=sorted(measure.CLOCKS), default="wall",
                     help="wall (default) or cpu: this process's CPU time, steadier on a busy machine (use with "
                          "--threads 1: more threads add OpenMP spinning to it); GPU runs always use wall")
    run.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                     help="time training and decoding steps of torch.compile'd models (backend default inductor; "
                          "decoding then writes a StaticCache; a method's 'auto' kernels take their compiled forms); "
                          "prefill stays eager")
    run.add_argument("--peak-tflops", type=float, help="device peak TFLOP/s for MFU (default: looked up on GPUs)")
    run.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/benchmarks", help="output directory (benchmark.json, benchmark.md)")
    return p.parse_args(argv)


def resolve(args) -> tuple[dict, dict]:
    base = QUICK_SIZE if args.quick else DEFAULT_SIZE
    size = dict(base)
    for field, arg in [("num_hidden_layers", "layers"), ("hidden_size", "hidden"),
                       ("intermediate_size", "intermediate"), ("num_attention_heads", "heads"),
                       ("num_key_value_heads", "kv_heads"), ("vocab_size", "vocab")]:
        if getattr(args, arg) is not None:
            size[field] = getattr(args, arg)
    seq = args.seq or (32 if args.quick else 512)
    work = dict(
        seq=seq, batch=args.batch, context=args.context or seq, decode_batch=args.decode_batch,
        decode_tokens=args.decode_tokens or (4 if args.quick else 32),
        reps=args.reps or (2 if args.quick else 10), warmup=args.warmup if args.warmup is not None else (
            1 if args.quick else 2),
        device=args.device, dtype=args.dtype or ("float32" if args.device == "cpu" else "bfloat16"),
        threads=args.threads, method_fields=parse_method_fields(args.method_field), seed=args.seed,
        clock="wall" if args.device != "cpu" else args.clock, compile=args.compile,
    )
    size["max_position_embeddings"] = max(seq, work["context"] + work["decode_tokens"]) + 8
    return size, work


def machine_info(device: torch.device) -> dict:
    info = {
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(), "device": str(device),
        "triton": TRITON_AVAILABLE,
    }
    if hasattr(os, "getloadavg"):  # other work on the machine shows here (1, 5, 15 minute averages)
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            info["cpu_model"] = names[0]
    except OSError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def linear_params(model: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def train_flops(model, size: dict, batch: int, seq: int) -> float:
    """Model FLOPs of one training step: 3 x (2 x linear parameters x tokens + causal attention)."""
    head_dim = size["hidden_size"] // size["num_attention_heads"]
    attention = 2 * size["num_hidden_layers"] * batch * size["num_attention_heads"] * head_dim * seq * (seq + 1)
    return 3 * (2 * linear_params(model) * batch * seq + attention)


class Bench:
    def __init__(self, cands: list[cand.Candidate], size: dict, work: dict, device: torch.device, log):
        self.cands, self.size, self.work, self.device, self.log = cands, size, work, device, log
        g = torch.Generator().manual_seed(work["seed"])
        vocab = size["vocab_size"]
        self.train_ids = torch.randint(0, vocab, (work["batch"], work["seq"]), generator=g).to(device)
        self.context_ids = torch.randint(0, vocab, (work["decode_batch"], work["context"]), generator=g).to(device)
        self.samples = {c.name: {} for c in cands}

    # one unit of work per phase -------------------------------------------------------------------------
    def train_step(self, c: cand.Candidate):
        c.model.train()
        if c.optimizer is None:
            c.optimizer = torch.optim.AdamW(c.model.parameters(), lr=1e-4, weight_decay=0.1)
        loss = c.train_forward(input_ids=self.train_ids, labels=self.train_ids, use_cache=False).loss
        loss.backward()
        c.optimizer.step()
        c.optimizer.zero_grad(set_to_none=True)

    def prefill(self, c: cand.Candidate):
        c.model.eval()
        with torch.inference_mode():
            c.model(input_ids=self.train_ids, use_cache=True, logits_to_keep=1,
                    cache=transformers.DynamicCache(config=c.model.config))

    def decode_setup(self, c: cand.Candidate):
        c.model.eval()
        with torch.inference_mode():
            if self.work["compile"]:  # fixed shapes, so the compiled decoding step is compiled once
                c.decode_cache = transformers.StaticCache(
                    config=c.model.config, max_cache_len=self.work["context"] + self.work["decode_tokens"])
            else:
                c.decode_cache = transformers.DynamicCache(config=c.model.config)
            out = c.model(input_ids=self.context_ids, use_cache=True, logits_to_keep=1,
                          cache=c.decode_cache)
            c.decode_token = out.logits[:, -1:].argmax(-1)

    def decode_step(self, c: cand.Candidate, token: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = c.decode_forward(input_ids=token, use_cache=True, logits_to_keep=1, cache=c.decode_cache)
            return out.logits[:, -1:].argmax(-1)

    # interleaved timing ---------------------------------------------------------------------------------
    def timed_phase(self, phase: str, fn, reps: int):
        warmup = self.work["warmup"]
        k = len(self.cands)
        start = time.perf_counter()
        for rep in range(warmup + reps):
            order = self.cands[rep % k:] + self.cands[:rep % k]  # rotate: no candidate always runs first
            for c in order:
                gc.collect()
                gc.disable()
                try:
                    seconds = measure.timed(lambda c=c: fn(c), self.device, self.work["clock"])
                finally:
                    gc.enable()
                if rep >= warmup:
                    self.samples[c.name].setdefault(phase, []).append(seconds)
        self.log(f"  {phase}: {warmup} warm-up + {reps} timed repetitions x {k} candidates in "
                 f"{time.perf_counter() - start:.0f} s")

    def timed_decode(self):
        """Decode per token, interleaved step by step: in each repetition every candidate decodes the same number
        of tokens from its own cache, one step each in turn (order rotated every step), then the caches are
        cropped back to the context. Every step is a sample, paired with the other candidates' steps of the same
        round, so that drift and bursts of load longer than one round cancel in the per-step ratios."""
        reps, warmup, n = self.work["reps"], self.work["warmup"], self.work["decode_tokens"]
        k = len(self.cands)
        start = time.perf_counter()
        for c in self.cands:
            self.decode_setup(c)
        for rep in range(warmup + reps):
            tokens = {c.name: c.decode_token for c in self.cands}
            gc.collect()
            gc.disable()
            try:
                for step in range(n):
                    rotation = (rep * n + step) % k
                    for c in self.cands[rotation:] + self.cands[:rotation]:
                        def step_once(c=c, tokens=tokens):
                            tokens[c.name] = self.decode_step(c, tokens[c.name])
                        seconds = measure.timed(step_once, self.device, self.work["clock"])
                        if rep >= warmup:
                            self.samples[c.name].setdefault("decode_token_s", []).append(seconds)
            finally:
                gc.enable()
            with torch.inference_mode():  # a StaticCache crops its (inference-mode) length counter in place
                for c in self.cands:
                    c.decode_cache.crop(-n)
        for c in self.cands:
            c.decode_cache = c.decode_token = None
        self.log(f"  decode_token_s: {warmup} warm-up + {reps} timed repetitions of {n} steps x {k} candidates, "
                 f"interleaved per step, in {time.perf_counter() - start:.0f} s")

    def run(self, phases: list[str]) -> dict:
        # the collections before each timed step then scan only what was made since (torch and transformers
        # leave millions of objects, a quarter of a second per full collection)
        gc.collect()
        gc.freeze()
        try:
            return self._run(phases)
        finally:
            gc.unfreeze()

    def _run(self, phases: list[str]) -> dict:
        results = {c.name: {} for c in self.cands}
        if "train" in phases:
            self.timed_phase("train_step_s", self.train_step, self.work["reps"])
        if "prefill" in phases:  # a tenth of a training step: more samples for the same time
            self.timed_phase("prefill_s", self.prefill, PREFILL_REPS_PER_REP * self.work["reps"])
        if "decode" in phases:
            self.timed_decode()
        if "memory" in phases:
            start = time.perf_counter()
            for c in self.cands:
                if c.optimizer is None:  # optimizer state exists before a real step is measured
                    self.train_step(c)
                gc.collect()
                before = measure.held_bytes(c.model, c.optimizer)
                results[c.name]["peak_train_bytes"] = measure.peak_bytes(lambda c=c: self.train_step(c), self.device,
                                                                         before)
                gc.collect()
                before = measure.held_bytes(c.model)
                results[c.name]["peak_prefill_bytes"] = measure.peak_bytes(lambda c=c: self.prefill(c), self.device,
                                                                           before)
            self.log(f"  memory: one untimed training step and prefill per candidate in "
                     f"{time.perf_counter() - start:.0f} s")
        w = self.work
        for c in self.cands:
            r = results[c.name]
            r["parameters"] = sum(p.numel() for p in c.model.parameters())
            r.update(c.method_fields)
            for phase, samples in self.samples[c.name].items():
                r[phase] = measure.summary(samples)
            tokens = {"train_step_s": w["batch"] * w["seq"], "prefill_s": w["batch"] * w["seq"],
                      "decode_token_s": w["decode_batch"]}
            r["tokens_per_s"] = {phase.removesuffix("_s"): tokens[phase] / r[phase]["median"]
                                 for phase in tokens if phase in r}
            r["train_flops_per_step"] = train_flops(c.model, self.size, w["batch"], w["seq"])
        return results


def check_compile(backend: str | None, work: dict) -> None:
    if backend and work["warmup"] < 1:
        raise SystemExit("--compile needs --warmup 1 or more: the first step compiles, and must not be timed")
    if backend and backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise SystemExit(f"unknown --compile backend {backend!r}; choose among "
                         f"{', '.join(torch._dynamo.list_backends())} (default inductor)")


def add_mfu(results: dict, peak: float | None, info: dict, device: torch.device, dtype: torch.dtype) -> float | None:
    """Each result's model FLOPs utilization on a GPU, from `peak` TFLOP/s (by default the GPU's known peak in a
    16-bit dtype); returns the peak used."""
    if peak is None and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        peak = next((v for k, v in PEAK_TFLOPS.items() if k in info.get("gpu", "")), None)
    if peak and device.type == "cuda":
        for r in results.values():
            if "train_step_s" in r:
                r["mfu"] = r["train_flops_per_step"] / r["train_step_s"]["median"] / (peak * 1e12)
    return peak


def main(argv=None) -> int:
    args = parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise SystemExit(f"unknown phases {bad}; choose among {PHASES}")
    size, work = resolve(args)
    check_compile(args.compile, work)
    device = torch.device(work["device"])
    dtype = getattr(torch, work["dtype"])
    torch.set_num_threads(work["threads"])

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    names = cand.all_candidates(work["method_fields"]) if args.methods == "all" else [
        m.strip() for m in args.methods.split(",") if m.strip()]
    for name in names:
        cand.parse_candidate(name, work["method_fields"])  # fail early on a typo
    if "vanilla" not in names:
        names.insert(0, "vanilla")  # every ratio is to vanilla

    info = machine_info(device)
    log(f"depthattn benchmark on {info.get('gpu') or info.get('cpu_model') or info['processor']}: "
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads "
        f"({torch.get_num_interop_threads()} inter-op), {work['dtype']}, device {device}")
    log(f"size {size}; workload {work}")
    start = time.perf_counter()
    cands = cand.build(names, size, work["method_fields"], device, dtype, seed=args.seed, log=log)
    if args.compile:
        # one compiled graph per candidate, all from the same forward code: raise dynamo's per-code limit
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(cands))
        torch._dynamo.config.accumulated_cache_size_limit = max(
            torch._dynamo.config.accumulated_cache_size_limit, 8 * len(cands))
        for c in cands:
            c.train_forward = torch.compile(c.model, backend=args.compile)
            c.decode_forward = torch.compile(c.model, backend=args.compile)
    bench = Bench(cands, size, work, device, log)
    results = bench.run(phases)

    peak = add_mfu(results, args.peak_tflops, info, device, dtype)

    report = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info,
        "size": size,
        "workload": work,
        "peak_tflops": peak,
        "memory_method": measure.CUDA_MEMORY_METHOD if device.type == "cuda" else measure.CPU_MEMORY_METHOD,
        "timing_method": (
            ("wall clock (time.perf_counter, device synchronised)" if work["clock"] == "wall" else
             "process CPU time (time.process_time)")
            + f", {work['warmup']} warm-up and {work['reps']} timed repetitions "
            f"({PREFILL_REPS_PER_REP * work['reps']} for prefill); each repetition runs every candidate once, in an "
            "order rotated by one per "
            "repetition (decoding: every candidate one step in turn, rotated every step, each step a sample); all "
            "candidates share the backbone weight tensors; ratios are medians (and quartiles) of ratios of samples "
            "taken in the same repetition (decoding: the same round)"),
        "candidates": results,
    }
    report.update(ratios_and_goals(report))
    report["elapsed_s"] = time.perf_counter() - start
    if hasattr(os, "getloadavg"):
        info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    atomic_write_json(out / "benchmark.json", report)
    table = markdown(report)
    atomic_write_bytes(out / "benchmark.md", table.encode("utf-8"))
    print(table)
    log(f"wrote {out / 'benchmark.json'} and {out / 'benchmark.md'} in {report['elapsed_s']:.0f} s")
    return 0
