"""Text generation from a saved model folder (weights + tokenizer): `depthattn generate` runs it."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import torch
from transformers import CompileConfig

from ..compat import compile_on_any_device
from ..data.tokenizer import start_token_id
from ..loading import open_model

MIN_TEMPERATURE = 1e-5  # below it, sampling is greedy (as vLLM's): logits over 1e-40 overflow float32 to inf


def generate_text(model_dir: str, prompt: str, max_new_tokens: int = 64, temperature: float = 0.8,
                  top_k: int = 50, seed: int = 0, tokenizer: str | None = None, compile: str | None = None,
                  method_fields: Mapping[str, object] | None = None) -> str:
    """Continue `prompt` with the model in `model_dir` (a final/ or checkpoint folder); an empty prompt starts a
    new document (from the tokenizer's BOS, else EOS). `compile`: a torch.compile backend (e.g. inductor) for the
    decoding steps, which then write a static KV cache. `method_fields`: how the method computes, over the saved
    config's (its `switchable_fields`, e.g. {"depth_impl": "cpu"}: Depth-Attention's C++ kernel, the fastest eager
    CPU decoding)."""
    if max_new_tokens < 1 or top_k < 0 or not 0 <= temperature < math.inf:
        raise ValueError(f"need --max-new-tokens >= 1, --top-k >= 0 (0: no limit) and a finite --temperature >= 0 "
                         f"(0: greedy); got {max_new_tokens}, {top_k} and {temperature}")
    if compile is not None and compile not in torch.compiler.list_backends(exclude_tags=()):
        raise ValueError(f"unknown --compile backend {compile!r}; choose among "
                         f"{', '.join(torch.compiler.list_backends())} (default inductor)")
    opened = open_model(model_dir, method_fields=method_fields, tokenizer=tokenizer)
    return sample(opened.model, opened.tokenizer, prompt, max_new_tokens, temperature, top_k, seed, compile,
                  trained_context=opened.default_context_length())


@torch.no_grad()
def sample(model, tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int, seed: int,
           compile: str | None = None, trained_context: int | None = None) -> str:
    """`temperature` below MIN_TEMPERATURE is greedy; past `trained_context` (the training seq_len) a note says
    the model never learnt those positions."""
    torch.manual_seed(seed)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    if ids.shape[1] == 0:  # nothing to continue ("", or text of no tokens): a new document, as the server starts one
        ids = torch.tensor([[start_token_id(tokenizer)]])
    context, prompt_tokens = model.config.max_position_embeddings, ids.shape[1]
    if trained_context is not None and trained_context < prompt_tokens + max_new_tokens <= context:
        print(f"note: a prompt of {prompt_tokens} tokens and {max_new_tokens} new ones go past the {trained_context} "
              "tokens the model was trained on (train_config.json's seq_len): it never learnt those positions",
              file=sys.stderr)
    if prompt_tokens + max_new_tokens > context:
        fix = (f"ask for at most {context - prompt_tokens} new tokens" if prompt_tokens < context else
               f"the prompt alone fills it; shorten the prompt by at least {prompt_tokens + max_new_tokens - context} "
               "tokens")
        raise ValueError(f"a prompt of {prompt_tokens} tokens and {max_new_tokens} new ones exceed the model's "
                         f"context of {context} tokens (max_position_embeddings): {fix}")
    sampling: dict[str, Any] = (dict(do_sample=True, temperature=temperature, top_k=top_k)
                                if temperature >= MIN_TEMPERATURE else dict(do_sample=False))
    if compile is not None:  # transformers compiles the decoding step when the cache is static
        sampling.update(cache_implementation="static", compile_config=compile_config(compile))
    out = model.generate(ids.to(model.device), max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         **sampling)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def compile_config(backend: str) -> CompileConfig:
    """transformers' automatic compilation with `backend`, the whole forward one graph, on any device (by itself
    `generate` compiles on accelerators only)."""
    return compile_on_any_device(CompileConfig(backend=backend, fullgraph=True))
