"""One rank of the tensor-parallel check (test_tensor_parallel.py), started by torchrun: for each saved model folder
given, the logits and greedy tokens of `from_pretrained(..., tp_plan="auto")` against the same model unsharded."""

import json
import sys

import torch
import torch.distributed as dist

from depthattn import DepthAttentionForCausalLM
from tests.helpers import registered_toy


def main(folders: list[str]):
    torch.set_num_threads(1)
    results = {}
    with registered_toy():  # the outside method, as the test's own process has it
        for folder in folders:
            results[folder] = check(folder)
    if dist.get_rank() == 0:
        print("RESULTS " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def check(folder: str) -> dict:
    """The logits' largest difference and whether the greedy tokens agree, sharded against whole."""
    sharded = DepthAttentionForCausalLM.from_pretrained(folder, tp_plan="auto")
    whole = DepthAttentionForCausalLM.from_pretrained(folder)
    ids = torch.randint(0, whole.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (sharded(ids).logits - whole(ids).logits).abs().max().item()
    generate = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    same_tokens = torch.equal(sharded.generate(ids[:1], **generate), whole.generate(ids[:1], **generate))
    q_rows = sharded.model.layers[0].self_attn.q_proj.weight
    local_rows = (q_rows.to_local() if hasattr(q_rows, "to_local") else q_rows).shape[0]
    return {"max_logit_difference": difference, "same_tokens": same_tokens, "q_rows_here": local_rows,
            "q_rows": whole.model.layers[0].self_attn.q_proj.weight.shape[0]}


if __name__ == "__main__":
    main(sys.argv[1:])
