"""The demo: a Depth-Attention model and its vanilla twin, side by side."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from . import DepthAttentionConfig, DepthAttentionForCausalLM
from .inference import cached_decoding_error, kv_cache_bytes


def run_demo(args) -> int:
    torch.manual_seed(0)
    prompt = torch.randint(0, 512, (2, 16))
    print(f"{'model':<16}{'parameters':>12}{'cache bytes':>14}{'max |cached - uncached|':>26}")
    for cross_layer in ("depth_attention", "none"):
        config = DepthAttentionConfig(
            vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, cross_layer=cross_layer,
        )
        torch.manual_seed(0)
        model = DepthAttentionForCausalLM(config).eval()
        out = model.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True)
        error = cached_decoding_error(model, out.sequences, prefill=prompt.shape[1])
        params = sum(p.numel() for p in model.parameters())
        print(f"{cross_layer:<16}{params:>12,}{kv_cache_bytes(out.cache):>14,}{error:>26.2e}")
        if error > 1e-4:
            print(f"cached decoding of {cross_layer} differs from the full forward by {error:.2e}")
            return 1
        model.save_pretrained(f"{args.out}/{cross_layer}")
        reloaded = AutoModelForCausalLM.from_pretrained(f"{args.out}/{cross_layer}")
        assert torch.equal(reloaded.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0),
                           out.sequences)
    print(f"cached == uncached for both; models saved under {args.out}/ and reloaded through AutoModelForCausalLM")
    return 0
