"""Greedy generation with vLLM for tests/vllm, run by `.venv-vllm/bin/python tests/vllm/driver.py JOB.json OUT.json`.

JOB: {"runs": [{"folder", "prompts" (token id lists), "max_tokens", "max_num_seqs", "max_num_batched_tokens",
"prefix_caching", optionally "tensor_parallel_size"}, ...]}.
One engine per run, one after the other in this process. OUT: per run, {"tokens": [ids per prompt]} or
{"error": the message} when the engine does not start (the engine core's own log goes to stderr).
"""

from __future__ import annotations

import gc
import json
import os
import sys

KV_CACHE_BYTES = 1 << 26  # plenty for tiny models; the CPU backend would otherwise reserve most of the memory


def generate(run: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    ranks = run.get("tensor_parallel_size", 1)
    if ranks > 1:  # a core per rank, bound by hand: vLLM's own binding wants a NUMA node per rank
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(rank % os.cpu_count()) for rank in range(ranks))
    try:
        llm = LLM(model=run["folder"], dtype="float32", enforce_eager=True, seed=0, max_model_len=128, block_size=32,
                  max_num_seqs=run["max_num_seqs"], max_num_batched_tokens=run["max_num_batched_tokens"],
                  enable_prefix_caching=run["prefix_caching"], tensor_parallel_size=ranks,
                  distributed_executor_backend="uni" if ranks == 1 else "mp",
                  kv_cache_memory_bytes=KV_CACHE_BYTES, gpu_memory_utilization=0.05)
    except Exception as error:  # a refused model: raised while building it
        return {"error": f"{type(error).__name__}: {error}"}
    params = SamplingParams(temperature=0.0, max_tokens=run["max_tokens"], ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in run["prompts"]], params, use_tqdm=False)
    tokens = [list(out.outputs[0].token_ids) for out in outputs]
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    return {"tokens": tokens}


if __name__ == "__main__":  # vLLM's engine core may run in a spawned process, which imports this module again
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine and worker here: no process starts
    job_path, out_path = sys.argv[1:]
    with open(job_path) as f:
        runs = json.load(f)["runs"]
    with open(out_path, "w") as f:
        json.dump([generate(run) for run in runs], f)
