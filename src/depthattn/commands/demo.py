"""The main job: train Depth-Attention and its vanilla twin in the study's base setting and compare them.

The setting is the study's (configs/study/core.toml: plain bytes of the embedded corpus, 8 layers x 128,
200 steps of 16 x 256 tokens), where the study finds the clearest Depth-Attention vs vanilla difference on a
CPU. The demo trains seed 0 of that setting and quotes the study's result over every seed it ran.

Every stage is resumable: rerunning after a crash or Ctrl-C picks up from the last checkpoint,
and finished stages (prepared data, finished runs) are reused.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..files import read_json_object

if TYPE_CHECKING:
    from ..train import TrainConfig

METHODS = {"Depth-Attention": "depth_attention", "vanilla": "vanilla"}
STEPS = 200
WARMUP_STEPS = 20  # the study's, for its STEPS; a demo of other length warms up for the same share of its steps
PROMPT = "ROMEO.\n"
BYTE_VOCAB = 258  # a byte-level BPE with no merges: the 256 bytes and two special tokens
STUDY_CONFIG = Path("configs/study/core.toml")  # the study whose base setting the demo trains


def demo_settings(data: Path, steps: int = STEPS) -> dict:
    """The study's base setting (a test keeps the two equal), trained for `steps`."""
    return {
        "model": {"preset": "tiny", "overrides": {"num_hidden_layers": 8}},
        "data": {"path": str(data), "seq_len": 256},
        "optim": {"lr": 2e-3, "warmup_steps": WARMUP_STEPS * steps // STEPS},
        "train": {"steps": steps, "batch_size": 16, "eval_every": 25, "eval_batches": 8},
    }


def demo_config(data: Path, out_dir: Path, method: str, steps: int) -> TrainConfig:
    from ..train import TrainConfig

    settings = demo_settings(data, steps)
    settings["model"]["method"] = method
    settings["train"].update(out_dir=str(out_dir), checkpoint_every=50, seed=0)
    return TrainConfig.from_dict(settings, source="demo")


def study_quote(steps: int) -> list[str]:
    """What the study found in the demo's setting, from its committed result files."""
    from ..study import CellStore, Study, format_interval, setting_differences, verdict, with_picks

    if steps != STEPS:
        return [f"(the study's numbers are for {STEPS} steps; this run trained {steps})"]
    if not STUDY_CONFIG.is_file():
        return ["(run from the repository root to see the study's result: docs/results/study.md)"]
    study = Study.load(STUDY_CONFIG)
    store = CellStore.of(study)
    others = [with_picks(Study.load(path), store) for path in sorted(STUDY_CONFIG.parent.glob("*.toml"))
              if path != STUDY_CONFIG]
    others.sort(key=lambda other: bool(other.confirm))  # a setting is named by the study that varies it first
    entries = setting_differences([study, *[other for other in others if not other.start_from]], store)
    here = next((entry for entry in entries if entry.study == study.name and entry.label == "base"), None)
    lines = []
    for column, label in (("DA − vanilla", "Depth-Attention − vanilla"), ("VR − vanilla", "value residual − vanilla"),
                          ("VE − vanilla", "value embeddings − vanilla"), ("MUDD − vanilla", "MUDDFormer − vanilla")):
        d = here and here.difference(column)
        if d and d.n > 1:
            lines.append(f"{label}: {d.diff_mean:+.4f} nats, 95% CI [{d.diff_low:+.4f}, "
                         f"{d.diff_high:+.4f}], p = {d.p_value:.3g}, lower in {d.wins}/{d.n} seeds")
    contrast = here and here.difference("DA − VR")
    if contrast and contrast.n > 1:
        lines.append(f"Depth-Attention − value residual: {contrast.diff_mean:+.4f} nats, 95% CI "
                     f"[{contrast.diff_low:+.4f}, {contrast.diff_high:+.4f}], lower in "
                     f"{contrast.wins}/{contrast.n} seeds")
    if not lines:
        return ["(the study has fewer than two seeds of this setting so far: docs/results/study.md)"]
    elsewhere = [(entry, d) for entry in entries if entry.study != study.name
                 and (d := entry.difference("DA − vanilla")) and d.n > 1]
    if elsewhere:
        lines.append("Depth-Attention − vanilla where the study changes one thing from this setting:")
        for entry, d in elsewhere:
            lines.append(f"  {entry.label} ({entry.study}): {format_interval(d)}, "
                         f"lower in {d.wins}/{d.n} seeds: {verdict(d)}")
    return lines


def check_same_run(run_dir: Path, cfg: TrainConfig):
    """A run folder the demo wrote before is reused (or resumed) only when it was trained with these settings."""
    recorded = run_dir / "train_config.json"
    if not recorded.exists():
        return
    before, now = read_json_object(recorded), cfg.to_dict()
    # the data and the run's folder lie under --out by construction: however --out is spelt, they are these
    layout = {("data", "path"), ("train", "out_dir")}
    changed = [f"{section}.{key} was {before.get(section, {}).get(key)!r}, now {value!r}"
               for section, values in now.items() for key, value in values.items()
               if (section, key) not in layout and before.get(section, {}).get(key) != value]
    if changed:
        raise SystemExit(f"depthattn demo: {run_dir} holds a run with other settings ({'; '.join(changed)}): "
                         "remove that folder, or pass another --out")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="output folder (default %(default)s)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training steps per model (default {STEPS}, the study's; the warmup keeps the study's "
                             f"share, {WARMUP_STEPS} of {STEPS})")
    parser.add_argument("--eval-tokens", type=int, default=None, metavar="N",
                        help="score the first N held-out tokens instead of the whole split (a quick check; "
                             "the study's numbers are for the whole split)")


def run(args: argparse.Namespace) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data import MANIFEST_NAME, TokenShards, prepare
    from ..evaluate.perplexity import TokenStream, compute_perplexity
    from ..evaluate.plots import plot_loss_curves
    from ..run_metrics import read_metrics
    from ..serving.cache import cached_decoding_error, kv_cache_bytes
    from ..serving.generation import sample
    from ..train import train

    out = Path(args.out)
    steps = STEPS if args.steps is None else args.steps
    if steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}")
    if args.eval_tokens is not None and args.eval_tokens < 2:
        raise ValueError(f"--eval-tokens must be at least 2 (one token of context, one scored), got {args.eval_tokens}")
    data = out / "data"
    started = time.perf_counter()
    if not (data / MANIFEST_NAME).exists():
        print(f"[1/4] preparing the embedded corpus (Shakespeare, 42 works) as plain bytes into {data}")
        prepare(["embedded"], data, vocab_size=BYTE_VOCAB)
    else:
        print(f"[1/4] reusing the prepared corpus in {data}")

    for i, (name, method) in enumerate(METHODS.items()):
        run_dir = out / method
        print(f"[2/4] training {name} ({i + 1}/{len(METHODS)}) in {run_dir}: 8 layers x 128, {steps} steps "
              f"of 16 x 256 bytes, seed 0")
        cfg = demo_config(data, run_dir, method, steps)
        check_same_run(run_dir, cfg)
        if (run_dir / "final" / "model.safetensors").exists():
            print("      finished earlier with these settings; reusing it")
        else:
            train(cfg, resume=(run_dir / "checkpoints").is_dir())

    val = TokenShards(data, "val")
    scored_tokens = val if args.eval_tokens is None else TokenStream(val, max_length=args.eval_tokens)
    split = "the whole held-out split" if len(scored_tokens) == len(val) else \
        f"the first {len(scored_tokens):,} of {len(val):,} held-out tokens"
    print(f"[3/4] evaluating on {split}")
    tokenizer = AutoTokenizer.from_pretrained(out / "depth_attention" / "final")
    rows = {}
    for name, method in METHODS.items():
        model = AutoModelForCausalLM.from_pretrained(out / method / "final").eval()
        scored = compute_perplexity(model, scored_tokens, block_size=256, tokenizer=tokenizer, progress=True)
        prompt = tokenizer(PROMPT, return_tensors="pt").input_ids
        generated = model.generate(prompt, max_new_tokens=64, do_sample=False, return_dict_in_generate=True,
                                   pad_token_id=tokenizer.pad_token_id)
        rows[name] = dict(
            params=sum(p.numel() for p in model.parameters()), loss=scored["loss"], bpb=scored["bits_per_byte"],
            tok_s=statistics.median(r["tokens_per_s"] for r in read_metrics(out / method / "metrics.jsonl")),
            cache=kv_cache_bytes(generated.cache) / (generated.sequences.shape[1] - 1),
            error=cached_decoding_error(model, generated.sequences, prefill=prompt.shape[1]),
            text=sample(model, tokenizer, PROMPT, 120, temperature=0.8, top_k=50, seed=0))

    print(f"\nscored on {split}; {steps} steps x {16 * 256:,} bytes per model\n")
    header = f"| {'model':<15} | {'parameters':>10} | {'val loss':>8} | {'bits/byte':>9} | {'median tok/s':>12} | " \
             f"{'KV bytes/token':>14} | {'cached vs full':>14} |"
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for name, r in rows.items():
        print(f"| {name:<15} | {r['params']:>10,} | {r['loss']:>8.4f} | {r['bpb']:>9.4f} | {r['tok_s']:>12,.0f} | "
              f"{r['cache']:>14,.0f} | {r['error']:>14.1e} |")
    difference = rows["Depth-Attention"]["loss"] - rows["vanilla"]["loss"]
    print(f"\nthis run (seed 0): Depth-Attention − vanilla = {difference:+.4f} nats per byte "
          f"({'Depth-Attention ahead' if difference < 0 else 'vanilla ahead'})")
    print("the study, same setting, paired by seed (configs/study/core.toml, docs/results/study.md):")
    quote = study_quote(steps)
    if len(scored_tokens) < len(val):
        quote.append("(this run scored part of the held-out split; the study scores all of it)")
    for line in quote:
        print(f"  {line}")

    plot = plot_loss_curves({name: out / method / "metrics.jsonl" for name, method in METHODS.items()},
                            out / "loss_curves.png", title="Depth-Attention vs vanilla on the embedded corpus (bytes)")
    print(f"\n[4/4] loss curves: {plot}")
    for name, r in rows.items():
        print(f"\n--- {name} sample (temperature 0.8) ---\n{r['text']}")
    print(f"\ndone in {time.perf_counter() - started:.0f} s; models in {out}/*/final "
          f"(load with AutoModelForCausalLM.from_pretrained)")
    worst = max(r["error"] for r in rows.values())
    if worst > 1e-4:
        print(f"cached decoding differs from the full forward by {worst:.1e}")
        return 1
    return 0
