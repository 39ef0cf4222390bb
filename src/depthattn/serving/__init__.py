"""Serving and generation: everything between a saved model folder and the tokens a client receives.

- `generation`: `depthattn generate`'s text generation (greedy or sampled, optionally compiled) and sampling;
- `cache`: checks and sizes of cached inference (cached decoding against the full forward, KV-cache bytes, the
  paged cache of continuous batching);
- `app`: `depthattn serve` from start to exit (`serve(folder, options)`): transformers' server pinned to one folder,
  the method's fields switched, the continuous-batching worker started and watched, SIGTERM a graceful exit;
- `server`: its request checks, so that every generation request is checked first;
- `transformers_serve`: the internals of transformers' server these use, where it has no public API;
- `vllm`: the vLLM plugin (`vllm.general_plugins` entry point) and the model built from vLLM's layers.

The other transformers internals these use, where it has no public API, are in `depthattn.compat`.
"""
