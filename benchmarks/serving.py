"""`python -m benchmarks.serving`: `depthattn serve` under N concurrent clients (closed loop: each client sends its
next request when the previous one is answered), for a Depth-Attention model and its vanilla twin (the same shape
and weights), both served at once and measured in alternating rounds, the order rotated every round, so that
machine drift cancels. Reports generated tokens/s and p50/p99 request latency per N, and the Depth-Attention /
vanilla throughput ratio (median of per-round ratios; goal >= 0.98 at every N). On Linux it also reads each
server's CPU time (/proc) around every round and reports generated tokens per CPU second of the server process:
on a shared or noisy machine that view is less moved by time the server spends descheduled. Writes serving.json
and serving.md."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM
from depthattn.data.tokenizer import word_level_tokenizer
from depthattn.files import atomic_write_bytes, atomic_write_json
from depthattn.loading import parse_method_fields

from .bench import DEFAULT_SIZE, QUICK_SIZE, machine_info
from .measure import paired_ratio, summary

GOAL = 0.98  # Depth-Attention / vanilla throughput, at every number of clients
METHOD, VANILLA = DepthAttentionConfig.cross_layer, "vanilla"  # the model's default method, against vanilla
TWINS = {METHOD: dict(cross_layer=METHOD), VANILLA: dict(cross_layer=VANILLA)}
PAGE_TOKENS = 256  # transformers' ContinuousBatchingConfig.page_size: tokens per paged-cache block


def workload_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options of the clients' workload, which every serving benchmark has (`workload` reads them)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--quick", action="store_true", help="a tiny model and few rounds (smoke runs)")
    p.add_argument("--clients", default="1,4,16", help="comma-separated numbers of concurrent clients")
    p.add_argument("--prompt-tokens", type=int, help="tokens per prompt (default 128; quick 16)")
    p.add_argument("--max-tokens", type=int, help="tokens generated per request (default 64; quick 8)")
    p.add_argument("--requests", type=int, default=2, help="requests per client per round (default 2)")
    p.add_argument("--rounds", type=int, help="timed rounds per server and N (default 5; quick 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first, per server and N (default 1)")
    return p


def workload(args: argparse.Namespace) -> tuple[list[int], dict]:
    """The numbers of clients and the workload of `workload_parser`'s options."""
    clients = [int(n) for n in args.clients.split(",") if n.strip()]
    if not clients or min(clients) < 1:
        raise SystemExit(f"--clients must list numbers >= 1, got {args.clients!r}")
    return clients, dict(prompt_tokens=args.prompt_tokens or (16 if args.quick else 128),
                         max_tokens=args.max_tokens or (8 if args.quick else 64), requests=args.requests,
                         rounds=args.rounds or (2 if args.quick else 5), warmup=args.warmup)


def parse_args(argv=None) -> argparse.Namespace:
    p = workload_parser("python -m benchmarks.serving", __doc__)
    p.add_argument("--no-continuous-batching", action="store_true",
                   help="serve requests one at a time (default: continuous batching)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="default float32 on CPU, bfloat16 on GPU")
    p.add_argument("--method-field", action="append", default=[], metavar="NAME=VALUE",
                   help="a field that the method switches (how it computes, not what; e.g. its kernels) for its "
                        "server (repeatable; default: the saved config's)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch threads of each server (default: all cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/benchmarks", help="output directory (serving.json, serving.md)")
    return p.parse_args(argv)


def save_twins(root: Path, size: dict, words: list[str], context: int, dtype: torch.dtype,
               seed: int) -> dict[str, str]:
    """A Depth-Attention model folder and its vanilla twin with the same weights (Depth-Attention adds none),
    random, with a word-level tokenizer over `words` (prompts of an exact length) and no EOS (every request
    generates max_tokens)."""
    tokenizer = word_level_tokenizer(words)
    torch.manual_seed(seed)
    weights, folders = None, {}
    for name, settings in TWINS.items():
        config = DepthAttentionConfig(**size, max_position_embeddings=context, eos_token_id=None,
                                      pad_token_id=tokenizer.pad_token_id, **settings)
        model = DepthAttentionForCausalLM(config).to(dtype)
        if weights is None:
            weights = model.state_dict()
        else:
            model.load_state_dict(weights)
        folders[name] = str(root / name)
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


class Server:
    """A `depthattn serve` process on a free port (the tests use it too); another server with its own `python` and
    `launcher` (`vllm serve`: benchmarks/vllm.py)."""

    def __init__(self, folder: str, options: list[str], log: Path, threads: int,
                 launcher: tuple[str, ...] = ("-m", "depthattn"), python: str = sys.executable):
        with socket.socket() as sock:
            sock.bind(("localhost", 0))
            self.port = sock.getsockname()[1]
        self.folder, self.log = folder, log
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
        with open(log, "w") as out:  # a file, not a pipe that would fill up and block the server
            self.process = subprocess.Popen(
                [python, *launcher, "serve", folder, "--port", str(self.port), *options],
                env=env, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600):
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://localhost:{self.port}/health", timeout=5)
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"the server did not start; its output ({self.log}):\n{self.log.read_text()[-3000:]}")

    def post(self, route: str, body: bytes | None = None) -> tuple[int, bytes]:
        """The status and content of the answer to a POST of `body` (a GET without one)."""
        request = urllib.request.Request(f"http://localhost:{self.port}{route}", data=body,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def complete(self, prompt: str, max_tokens: int) -> tuple[float, int]:
        """Seconds until the answer, and the tokens generated."""
        start = time.perf_counter()
        status, answer = self.post("/v1/completions", json.dumps(
            dict(prompt=prompt, max_tokens=max_tokens, temperature=0)).encode())
        if status != 200:
            raise RuntimeError(f"the server answered {status}: {answer.decode()}")
        return time.perf_counter() - start, json.loads(answer)["usage"]["completion_tokens"]

    def cpu_seconds(self) -> float | None:
        """User and system CPU time so far of the server process and the processes it started (transformers 5.25
        generates in a process of its own), all their threads, where /proc has it."""
        ticks, pending, seen = 0, [self.process.pid], set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                            for c in (task / "children").read_text().split()]
            except OSError:
                if pid == self.process.pid:
                    return None
                continue  # a child that exited meanwhile
            ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
            pending += children
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)


def run_round(server: Server, prompts: list[list[str]], max_tokens: int) -> tuple[float, float | None, list[float]]:
    """Generated tokens per second of the round's wall time and per CPU second of the server (None without
    /proc), and each request's latency; client i sends prompts[i]."""
    def client(own: list[str]) -> list[tuple[float, int]]:
        return [server.complete(prompt, max_tokens) for prompt in own]

    cpu_start, start = server.cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        answers = [a for own in pool.map(client, prompts) for a in own]
    wall, cpu_end = time.perf_counter() - start, server.cpu_seconds()
    tokens = sum(tokens for _, tokens in answers)
    per_cpu_s = tokens / (cpu_end - cpu_start) if cpu_start is not None and cpu_end > cpu_start else None
    return tokens / wall, per_cpu_s, [latency for latency, _ in answers]


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] if len(samples) > 1 else samples[0]


def measure(servers: dict[str, Server], clients: int, work: dict, words: list[str], rng: random.Random) -> dict:
    names = list(servers)
    throughput, per_cpu_s, latencies = ({n: [] for n in servers} for _ in range(3))
    for round_index in range(work["warmup"] + work["rounds"]):
        prompts = [[" ".join(rng.choices(words, k=work["prompt_tokens"])) for _ in range(work["requests"])]
                   for _ in range(clients)]  # the same prompts for both servers in a round
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            tokens_per_s, tokens_per_cpu_s, seconds = run_round(servers[name], prompts, work["max_tokens"])
            if round_index >= work["warmup"]:
                throughput[name].append(tokens_per_s)
                latencies[name] += seconds
                if tokens_per_cpu_s is not None:
                    per_cpu_s[name].append(tokens_per_cpu_s)
    result = {name: {"tokens_per_s": summary(throughput[name]), "tokens_per_cpu_s": summary(per_cpu_s[name]),
                     "latency_p50_s": percentile(latencies[name], 50),
                     "latency_p99_s": percentile(latencies[name], 99), "requests": len(latencies[name])}
              for name in names}
    result["ratio"] = paired_ratio(throughput[METHOD], throughput[VANILLA])
    result["cpu_ratio"] = paired_ratio(per_cpu_s[METHOD], per_cpu_s[VANILLA])
    result["goal_met"] = result["ratio"]["median"] >= GOAL
    return result


def measure_clients(servers: dict[str, Server], clients: list[int], work: dict, words: list[str],
                    seed: int) -> dict:
    """`measure` at each number of clients in turn, once the servers are up; the servers are stopped after."""
    try:
        for server in servers.values():
            server.wait_ready()
        rng = random.Random(seed)
        results = {}
        for n in clients:
            results[n] = measure(servers, n, work, words, rng)
            print(f"{n} clients: DA / vanilla throughput {results[n]['ratio']['median']:.3f}", file=sys.stderr,
                  flush=True)
        return results
    finally:
        for server in servers.values():
            server.stop()


def write_report(report: dict, stem: Path):
    """`stem`.json and the table, `stem`.md, also printed."""
    atomic_write_json(stem.with_suffix(".json"), report)
    table = markdown(report)
    atomic_write_bytes(stem.with_suffix(".md"), table.encode("utf-8"))
    print(table)


def markdown(report: dict) -> str:
    lines = [f"Serving: `{report['command']}`", "",
             "| clients | Depth-Attention tok/s | vanilla tok/s | DA / vanilla (median [p25, p75]) | "
             "DA / vanilla per server CPU second | DA p50 / p99 latency | vanilla p50 / p99 latency | goal >= 0.98 |",
             "|---|---|---|---|---|---|---|---|"]
    for clients, r in report["results"].items():
        da, va, ratio, cpu = r[METHOD], r[VANILLA], r["ratio"], r["cpu_ratio"]
        lines.append(
            f"| {clients} | {da['tokens_per_s']['median']:.1f} | {va['tokens_per_s']['median']:.1f} | "
            f"{ratio['median']:.3f} [{ratio['p25']:.3f}, {ratio['p75']:.3f}] | "
            + (f"{cpu['median']:.3f} [{cpu['p25']:.3f}, {cpu['p75']:.3f}] | " if cpu else "n/a | ") +
            f"{da['latency_p50_s']:.3f} / {da['latency_p99_s']:.3f} s | "
            f"{va['latency_p50_s']:.3f} / {va['latency_p99_s']:.3f} s | {'met' if r['goal_met'] else 'NOT met'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    clients, work = workload(args)
    size = dict(QUICK_SIZE if args.quick else DEFAULT_SIZE)
    work.update(continuous_batching=not args.no_continuous_batching, device=args.device,
                method_fields=parse_method_fields(args.method_field),
                dtype=args.dtype or ("float32" if args.device == "cpu" else "bfloat16"), threads=args.threads)
    request_tokens = work["prompt_tokens"] + work["max_tokens"]
    # room for every client's request at once, twice over (transformers keeps a safety margin of free blocks)
    cb_blocks = 2 * max(clients) * -(-request_tokens // PAGE_TOKENS) if work["continuous_batching"] else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info(torch.device(args.device))
    print(f"serving benchmark: size {size}; workload {work}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        words = [f"w{i}" for i in range(size["vocab_size"] - 3)]  # the vocabulary: 3 special tokens, then words
        folders = save_twins(Path(root), size, words, request_tokens, getattr(torch, work["dtype"]), args.seed)
        options = ["--device", args.device] + (
            ["--continuous-batching", "--cb-num-blocks", str(cb_blocks)] if cb_blocks else [])
        switch = {METHOD: [part for field in args.method_field for part in ("--method-field", field)]}
        servers = {name: Server(folder, options + switch.get(name, []), out / f"serving-{name}.log", args.threads)
                   for name, folder in folders.items()}
        results = measure_clients(servers, clients, work, words, args.seed)
    if hasattr(os, "getloadavg"):
        info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.serving " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info, "size": size, "workload": work, "cb_num_blocks": cb_blocks, "goal": GOAL,
        "method": "closed-loop clients over HTTP (urllib, one thread each); tokens/s = generated tokens of a round "
                  "/ its wall time; both servers alive throughout, rounds alternate between them (order rotated "
                  "each round, the same prompts for both); ratios are medians of per-round ratios",
        "results": results, "elapsed_s": time.perf_counter() - start,
    }
    write_report(report, out / "serving")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
