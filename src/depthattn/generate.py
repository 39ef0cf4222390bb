"""Text generation from a saved model folder (weights + tokenizer)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def generate_text(model_dir: str, prompt: str, max_new_tokens: int = 64, temperature: float = 0.8,
                  top_k: int = 50, seed: int = 0) -> str:
    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} holds no saved model (config.json); pass a folder written by train")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    return sample(model, tokenizer, prompt, max_new_tokens, temperature, top_k, seed)


@torch.no_grad()
def sample(model, tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int, seed: int) -> str:
    torch.manual_seed(seed)
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
    sampling = dict(do_sample=True, temperature=temperature, top_k=top_k) if temperature > 0 else dict(do_sample=False)
    out = model.generate(ids, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    return tokenizer.decode(out[0], skip_special_tokens=True)
