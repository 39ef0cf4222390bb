"""`python -m benchmarks.prepare`: the speed of `depthattn prepare --workers N` against the tokenizer alone.

On one text file (the embedded corpus repeated to --megabytes, which prepare cuts into documents of about
5,000 characters, the size of a typical web document; 20% of them validation, so that even a small text fills
both splits) and a byte-level BPE of 4,096 tokens trained on it beforehand (passed as --tokenizer, so no BPE is trained
in the timed runs), it times:
- the ceiling: the tokenizer alone, `encode_batch_fast` (the call prepare's workers make) over the same batches
  of documents, in this process with the tokenizer's own threads off, so on one core;
- `prepare` end to end (read, encode in N worker processes, write the shards and the manifest) for each N of
  --workers.
Every repetition runs each of them once, the order rotated by one each repetition, so machine drift cancels in
the ratios (medians of per-repetition ratios): per-worker rate / ceiling (goal >= 0.9) and rate(2 workers) /
rate(1 worker) (goal >= 1.8). Tokens are those prepare writes, EOS included. The hours that 30B tokens would take
on 1, 2, 8 and 64 cores are an extrapolation: linear in the cores from the per-worker rate with the most workers
measured. Writes JSON (--out) and a markdown table beside it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from depthattn.data import embedded_corpus_documents, prepare, train_bpe_tokenizer
from depthattn.data.encode import document_batches, fast_tokenizer
from depthattn.data.sources import iter_documents, numbered_documents, resolve_sources
from depthattn.files import atomic_write_bytes, atomic_write_json

from .bench import machine_info
from .measure import paired_ratio, summary

VOCAB_SIZE = 4096
CHUNK_CHARS = 5000
VAL_FRACTION = 0.2
GOALS = {"per_worker_over_ceiling": 0.9, "two_workers_over_one": 1.8}
TARGET_TOKENS = 30e9
CORES = (1, 2, 8, 64)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prepare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 MB and one repetition (smoke runs, tests)")
    p.add_argument("--megabytes", type=float, help="size of the text in MB of UTF-8 (default 50; quick 2)")
    p.add_argument("--workers", default="1,2", help="comma-separated numbers of worker processes (default 1,2)")
    p.add_argument("--reps", type=int, help="timed repetitions of each run (default 3; quick 1)")
    p.add_argument("--out", default="runs/benchmarks/prepare.json",
                   help="the JSON report; the markdown table goes beside it (.md)")
    return p.parse_args(argv)


def write_text(path: Path, num_bytes: int) -> None:
    """The embedded corpus, its documents joined by blank lines, repeated and cut to about `num_bytes` bytes."""
    corpus = "\n\n".join(embedded_corpus_documents()).encode("utf-8")
    copies = -(-num_bytes // len(corpus))  # rounded up
    text = (b"\n\n".join([corpus] * copies))[:num_bytes].decode("utf-8", "ignore")
    path.write_text(text, encoding="utf-8")


def time_ceiling(batches: list, tokenizer_dir: Path) -> tuple[float, int]:
    """Seconds the tokenizer alone takes over `batches` on one thread, and the tokens prepare writes for them."""
    tokenizer = fast_tokenizer(tokenizer_dir)
    start = time.perf_counter()
    num_tokens = 0
    for batch in batches:
        encodings = tokenizer.encode_batch_fast(batch.texts, add_special_tokens=False)
        num_tokens += sum(len(encoding) for encoding in encodings) + len(encodings)  # + an EOS per document
    return time.perf_counter() - start, num_tokens


def time_prepare(text: Path, tokenizer_dir: Path, out: Path, workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    manifest = prepare([str(text)], out, tokenizer=tokenizer_dir, chunk_chars=CHUNK_CHARS, val_fraction=VAL_FRACTION,
                       workers=workers, overwrite=True, progress=False)
    return time.perf_counter() - start, sum(split["num_tokens"] for split in manifest["splits"].values())


def measure(text: Path, tokenizer_dir: Path, root: Path, workers: list[int], reps: int) -> dict:
    """Seconds per repetition of the ceiling and of prepare with each number of workers, rotated each repetition."""
    batches = list(document_batches(numbered_documents(resolve_sources([str(text)]), chunk_chars=CHUNK_CHARS)))
    runs = {"ceiling": lambda: time_ceiling(batches, tokenizer_dir)}
    for n in workers:
        runs[f"workers_{n}"] = lambda n=n: time_prepare(text, tokenizer_dir, root / f"out_{n}", n)
    time_prepare(text, tokenizer_dir, root / "warmup", 1)  # untimed: starts the forkserver the workers fork from
    seconds, tokens = {name: [] for name in runs}, {}
    names = list(runs)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            elapsed, tokens[name] = runs[name]()
            seconds[name].append(elapsed)
            print(f"rep {rep + 1}/{reps} {name}: {elapsed:.2f} s, {tokens[name] / elapsed:,.0f} tokens/s",
                  file=sys.stderr, flush=True)
    if len(set(tokens.values())) != 1:
        raise SystemExit(f"the runs counted different tokens: {tokens}")
    return {"documents": sum(len(batch.texts) for batch in batches), "batches": len(batches),
            "tokens": tokens["ceiling"], "seconds": seconds}


def analyse(measured: dict, workers: list[int]) -> dict:
    tokens, seconds = measured["tokens"], measured["seconds"]
    results = {name: {"seconds": summary(samples), "tokens_per_s": tokens / summary(samples)["median"]}
               for name, samples in seconds.items()}
    for n in workers:
        result = results[f"workers_{n}"]
        result["tokens_per_s_per_worker"] = result["tokens_per_s"] / n
        # per repetition: (tokens / (n x seconds)) / (tokens / ceiling seconds)
        result["per_worker_over_ceiling"] = paired_ratio(seconds["ceiling"], [n * s for s in seconds[f"workers_{n}"]])
    ratios = {"per_worker_over_ceiling": {n: results[f"workers_{n}"]["per_worker_over_ceiling"] for n in workers}}
    if {1, 2} <= set(workers):
        ratios["two_workers_over_one"] = paired_ratio(seconds["workers_1"], seconds["workers_2"])
    most = max(workers)
    per_worker = results[f"workers_{most}"]["tokens_per_s_per_worker"]
    extrapolation = {"from": f"the per-worker rate with {most} worker(s), {per_worker:,.0f} tokens/s, times the cores",
                     "hours_for_30b_tokens": {cores: TARGET_TOKENS / (per_worker * cores) / 3600 for cores in CORES}}
    return {"results": results, "ratios": ratios, "extrapolation": extrapolation}


def markdown(report: dict) -> str:
    machine, work, results = report["machine"], report["workload"], report["results"]
    lines = [
        f"Data preparation: `{report['command']}`",
        "",
        f"Machine: {machine.get('cpu_model') or machine['processor']}, {machine['cpu_count']} CPUs "
        f"({machine['usable_cpus']} usable); load average {machine.get('load_average_at_start')} at start, "
        f"{machine.get('load_average_at_end')} at end.",
        f"Text: {work['megabytes']} MB ({work['documents']:,} documents, {work['batches']} batches, "
        f"{work['tokens']:,} tokens with EOS; documents of about {work['chunk_chars']:,} characters), byte-level BPE "
        f"of {work['vocab_size']} tokens; "
        f"{work['reps']} repetition(s), medians.",
        "",
        "| run | seconds | tokens/s | tokens/s per worker | per worker / ceiling |",
        "|---|---|---|---|---|",
        f"| tokenizer alone, 1 core (ceiling) | {results['ceiling']['seconds']['median']:.2f} | "
        f"{results['ceiling']['tokens_per_s']:,.0f} | | |",
    ]
    for n in work["workers"]:
        result = results[f"workers_{n}"]
        lines.append(f"| prepare, {n} worker(s) | {result['seconds']['median']:.2f} | {result['tokens_per_s']:,.0f} "
                     f"| {result['tokens_per_s_per_worker']:,.0f} "
                     f"| {result['per_worker_over_ceiling']['median']:.3f} |")
    per_worker = report["ratios"]["per_worker_over_ceiling"]
    goals = (f"Goals: per-worker rate / ceiling >= {GOALS['per_worker_over_ceiling']} ("
             + ", ".join(f"{n} worker(s): {ratio['median']:.3f}" for n, ratio in per_worker.items()) + ")")
    if "two_workers_over_one" in report["ratios"]:
        goals += (f"; rate with 2 workers / with 1 >= {GOALS['two_workers_over_one']} "
                  f"({report['ratios']['two_workers_over_one']['median']:.3f})")
    lines += ["", goals + "."]
    extrapolation = report["extrapolation"]
    lines += ["", f"Extrapolation, not a measurement: hours for 30B tokens, from {extrapolation['from']}.", "",
              "| cores | hours |", "|---|---|"]
    lines += [f"| {cores} | {hours:,.1f} |" for cores, hours in extrapolation["hours_for_30b_tokens"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    workers = [int(n) for n in args.workers.split(",") if n.strip()]
    if not workers or min(workers) < 1:
        raise SystemExit(f"--workers must list numbers >= 1, got {args.workers!r}")
    megabytes = args.megabytes or (2 if args.quick else 50)
    reps = args.reps or (1 if args.quick else 3)
    out = Path(args.out)
    info = machine_info(torch.device("cpu"))
    info["usable_cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        write_text(root / "text.txt", int(megabytes * 1e6))
        # trained on the text itself, with the tokenizer's own threads
        train_bpe_tokenizer(iter_documents(resolve_sources([root / "text.txt"])), VOCAB_SIZE, root / "tokenizer")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # from here on: the ceiling runs on one core
        measured = measure(root / "text.txt", root / "tokenizer", root, workers, reps)
    if hasattr(os, "getloadavg"):
        info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.prepare " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info,
        "workload": {"megabytes": megabytes, "workers": workers, "reps": reps, "vocab_size": VOCAB_SIZE,
                     "chunk_chars": CHUNK_CHARS, "val_fraction": VAL_FRACTION,
                     **{key: measured[key] for key in ("documents", "batches", "tokens")}},
        "goals": GOALS,
        "method": "wall time; ceiling = encode_batch_fast over prepare's batches in one process, tokenizer threads "
                  "off; prepare = the prepare() call with a ready --tokenizer; order rotated each repetition; ratios "
                  "are medians of per-repetition ratios",
        **analyse(measured, workers),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, report)
    table = markdown(report)
    atomic_write_bytes(out.with_suffix(".md"), table.encode("utf-8"))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
