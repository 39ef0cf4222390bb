"""Tiny model folders saved by depthattn at commit 927d8db, with the logits that code computed (for
`tests/model/test_saved_folders.py`). Run from a checkout of that commit: PYTHONPATH=src python make.py OUT."""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM

out = Path(sys.argv[1])
torch.manual_seed(0)
ids = torch.randint(0, 64, (1, 12))
CASES = {"vanilla": {}, "depth_attention": {}, "depth_bias": dict(cross_layer="depth_attention", depth_score_bias=True),
         "value_residual": {}, "mudd": {}, "hyper_connections": {}, "moda": {}}
for method, settings in CASES.items():
    torch.manual_seed(1)
    config = DepthAttentionConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                  max_position_embeddings=32, **{"cross_layer": method, **settings})
    model = DepthAttentionForCausalLM(config).eval()
    with torch.no_grad():  # learned mixes off their initial values, so that loading them matters
        for name, p in model.named_parameters():
            if "cross_layer" in name:
                p.add_(0.1 * torch.randn_like(p))
        logits = model(ids).logits
    folder = out / method
    model.save_pretrained(folder)
    save_file({"input_ids": ids, "logits": logits.contiguous()}, str(folder / "expected.safetensors"))
    print(method, sum(p.numel() for p in model.parameters()))
