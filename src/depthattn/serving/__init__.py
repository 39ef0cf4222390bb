"""Serving and generation: everything between a saved model folder and the tokens a client receives.

- `generation`: `depthattn generate`'s text generation (greedy or sampled, optionally compiled) and sampling;
- `cache`: checks and sizes of cached inference (cached decoding against the full forward, KV-cache bytes, the
  paged cache of continuous batching);
- `server`: the OpenAI-compatible server of `depthattn serve` (transformers' server, pinned to one folder, with
  every generation request checked first);
- `vllm`: the vLLM plugin (`vllm.general_plugins` entry point) and the model built from vLLM's layers.

The transformers internals these use, where it has no public API, are in `depthattn.compat`.
"""
