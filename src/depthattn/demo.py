"""The main job: train Depth-Attention and its vanilla twin on the embedded corpus and compare them.

Every stage is resumable: rerunning after a crash or Ctrl-C picks up from the last checkpoint,
and finished stages (prepared data, finished runs) are reused.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .data import MANIFEST_NAME, TokenShards, prepare
from .evaluate.plots import plot_loss_curves, read_metrics
from .generate import sample
from .inference import cached_decoding_error, kv_cache_bytes
from .train import TrainConfig, evaluate, train
from .train.distributed import World

METHODS = {"Depth-Attention": "depth_attention", "vanilla": "vanilla"}
STEPS = 500
PROMPT = "ROMEO.\n"


def demo_config(data: Path, out_dir: Path, method: str, steps: int) -> TrainConfig:
    return TrainConfig.from_dict({
        "model": {"preset": "tiny", "method": method, "overrides": {"num_hidden_layers": 6}},
        "data": {"path": str(data), "seq_len": 256},
        "optim": {"lr": 2e-3, "warmup_steps": 30},
        "train": {"out_dir": str(out_dir), "steps": steps, "batch_size": 16, "eval_every": 100,
                  "eval_batches": 8, "checkpoint_every": 100, "seed": 0},
    }, source="demo")


def run_demo(args) -> int:
    out = Path(args.out)
    steps = args.steps or STEPS
    data = out / "data"
    started = time.perf_counter()
    if not (data / MANIFEST_NAME).exists():
        print(f"[1/4] preparing the embedded corpus (Shakespeare, 42 works) into {data}")
        prepare(["embedded"], data, vocab_size=4096)
    else:
        print(f"[1/4] reusing the prepared corpus in {data}")

    for i, (name, method) in enumerate(METHODS.items()):
        run_dir = out / method
        print(f"[2/4] training {name} ({i + 1}/{len(METHODS)}) in {run_dir}")
        if (run_dir / "final" / "model.safetensors").exists():
            print("      finished earlier; reusing it")
        else:
            train(demo_config(data, run_dir, method, steps), resume=True)

    print("[3/4] evaluating on the whole held-out split")
    val = TokenShards(data, "val")
    tokenizer = AutoTokenizer.from_pretrained(out / "depth_attention" / "final")
    rows = []
    for name, method in METHODS.items():
        model = AutoModelForCausalLM.from_pretrained(out / method / "final").eval()
        val_loss = evaluate(model, val, 16, 256, max_batches=10_000, world=World())
        prompt = tokenizer(PROMPT, return_tensors="pt").input_ids
        generated = model.generate(prompt, max_new_tokens=64, do_sample=False, return_dict_in_generate=True,
                                   pad_token_id=tokenizer.pad_token_id)
        cache_per_token = kv_cache_bytes(generated.cache) / (generated.sequences.shape[1] - 1)
        error = cached_decoding_error(model, generated.sequences, prefill=prompt.shape[1])
        text = sample(model, tokenizer, PROMPT, 60, temperature=0.8, top_k=50, seed=0)
        tokens_per_s = statistics.median(r["tokens_per_s"] for r in read_metrics(out / method / "metrics.jsonl"))
        rows.append((name, sum(p.numel() for p in model.parameters()), val_loss, math.exp(val_loss),
                     tokens_per_s, cache_per_token, error, text))

    print(f"\nheld-out split: {len(val):,} tokens; {steps} steps x {16 * 256:,} tokens per model\n")
    header = f"| {'model':<15} | {'parameters':>10} | {'val loss':>8} | {'val ppl':>8} | {'median tok/s':>12} | " \
             f"{'KV bytes/token':>14} | {'cached vs full':>14} |"
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for name, params, loss, ppl, tok_s, cache, error, _ in rows:
        print(f"| {name:<15} | {params:>10,} | {loss:>8.4f} | {ppl:>8.2f} | {tok_s:>12,.0f} | {cache:>14,.0f} | "
              f"{error:>14.1e} |")

    plot = plot_loss_curves({name: out / method / "metrics.jsonl" for name, method in METHODS.items()},
                            out / "loss_curves.png", title="Depth-Attention vs vanilla on the embedded corpus")
    print(f"\n[4/4] loss curves: {plot}")
    for name, *_, text in rows:
        print(f"\n--- {name} sample (temperature 0.8) ---\n{text}")
    print(f"\ndone in {time.perf_counter() - started:.0f} s; models in {out}/*/final "
          f"(load with AutoModelForCausalLM.from_pretrained)")
    worst = max(row[6] for row in rows)
    if worst > 1e-4:
        print(f"cached decoding differs from the full forward by {worst:.1e}")
        return 1
    return 0
