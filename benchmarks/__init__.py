"""Speed and memory of depthattn models: vanilla, Depth-Attention and every other cross-layer method,
against each other and against transformers' Qwen3ForCausalLM on the same weights.

Run `python -m benchmarks --help` from the repository root; see benchmarks/README.md.
"""
