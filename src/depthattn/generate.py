"""Text generation from a saved model folder (weights + tokenizer)."""

from __future__ import annotations

import argparse
import math

import torch
from transformers import CompileConfig

from .evaluate.loading import check_model_dir, find_tokenizer, load_model
from .ops import DEPTH_IMPLS


def generate_text(model_dir: str, prompt: str, max_new_tokens: int = 64, temperature: float = 0.8,
                  top_k: int = 50, seed: int = 0, tokenizer: str | None = None, compile: str | None = None,
                  depth_impl: str | None = None) -> str:
    """Continue `prompt` with the model in `model_dir` (a final/ or checkpoint folder); an empty prompt starts a
    new document (from the tokenizer's BOS, else EOS). `compile`: a torch.compile backend (e.g. inductor) for the
    decoding steps, which then write a static KV cache. `depth_impl`: the depth mixing implementation, over the
    saved config's (`"cpu"`: the C++ kernel, the fastest eager CPU decoding)."""
    if max_new_tokens < 1 or top_k < 0 or not 0 <= temperature < math.inf:
        raise ValueError(f"need --max-new-tokens >= 1, --top-k >= 0 (0: no limit) and a finite --temperature >= 0 "
                         f"(0: greedy); got {max_new_tokens}, {top_k} and {temperature}")
    if compile is not None and compile not in torch._dynamo.list_backends(exclude_tags=()):
        raise ValueError(f"unknown --compile backend {compile!r}; choose among "
                         f"{', '.join(torch._dynamo.list_backends())} (default inductor)")
    tok = find_tokenizer(check_model_dir(model_dir), tokenizer)
    model = load_model(model_dir, depth_impl=depth_impl)
    return sample(model, tok, prompt, max_new_tokens, temperature, top_k, seed, compile)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder saved by train: final/ or checkpoints/step_* "
                                      "(e.g. runs/demo/depth_attention/final)")
    parser.add_argument("prompt", help='the text to continue; "" starts a new document')
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    parser.add_argument("--top-k", type=int, default=50, help="0: no limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the model folder's)")
    parser.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                        help="torch.compile the decoding steps (static KV cache; backend default inductor)")
    parser.add_argument("--depth-impl", choices=DEPTH_IMPLS,
                        help="depth mixing implementation (default: the saved config's; 'cpu': a C++ kernel for "
                             "eager CPU decoding, built on first use)")


def run(args: argparse.Namespace) -> int:
    print(generate_text(args.model, args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed,
                        args.tokenizer, args.compile, args.depth_impl))
    return 0


@torch.no_grad()
def sample(model, tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int, seed: int,
           compile: str | None = None) -> str:
    from .evaluate.perplexity import start_token_id

    torch.manual_seed(seed)
    ids = tokenizer(prompt, return_tensors="pt").input_ids if prompt else torch.tensor([[start_token_id(tokenizer)]])
    sampling = dict(do_sample=True, temperature=temperature, top_k=top_k) if temperature > 0 else dict(do_sample=False)
    if compile is not None:  # transformers compiles the decoding step when the cache is static
        sampling.update(cache_implementation="static", compile_config=compile_config(compile))
    out = model.generate(ids.to(model.device), max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         **sampling)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def compile_config(backend: str) -> CompileConfig:
    """transformers' automatic compilation with `backend`, the whole forward one graph, on any device (by itself
    `generate` compiles on accelerators only)."""
    config = CompileConfig(backend=backend, fullgraph=True)
    config._compile_all_devices = True  # transformers' switch for compiling on a CPU as well
    return config
