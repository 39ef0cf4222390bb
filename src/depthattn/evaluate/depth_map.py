"""`depthattn depth-map`: how much each layer draws on each earlier layer (the paper's Fig. 3).

Forward passes with `output_depth_weights=True` give, per layer l with sources (per unrolled step of a looped model),
weights (B, Hkv, T, |S(l)| + 1) over the layer's sources S(l) and itself (last). Averaged over batch rows
(samples), KV heads and tokens, they make row l of a D x D matrix (D = num_hidden_layers * num_loops):
entry (l, j) is the mean weight layer l gives to source j, (l, l) the weight it keeps for its own value.
With the softmax and uniform rules every row sums to 1; the linear mixes (depth_linear, depth_linear_every) learn
free weights, negative or above 1, whose rows need not. Entries for layers that are not sources are 0; layer 0
(no sources) is 1 on the diagonal.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from ..data.shards import TokenShards
from ..files import atomic_write_json, make_folder
from ..loading import (
    check_data_tokenizer,
    check_data_vocab,
    find_tokenizer,
    holds_tokenizer,
    model_dtype_name,
    open_model,
    run_metadata,
)
from ..methods import DESCRIPTIONS
from ..methods.descriptions.base import AttentionMixerDescription
from .plots import plot_depth_map

DEFAULT_SAMPLES = 16
DEFAULT_SEQ_LEN = 256
DEFAULT_BATCH_SIZE = 4


def step_sources(model) -> list[list[int]]:
    """Depth sources of every unrolled step, for a method whose `output_depth_weights` weighs them per token."""
    cross_layer = getattr(model.config, "cross_layer", None)
    method = DESCRIPTIONS.get(cross_layer) if cross_layer is not None else None
    if method is None or not method.maps_depth_weights or not issubclass(method, AttentionMixerDescription):
        mapped = ", ".join(name for name, other in DESCRIPTIONS.items() if other.maps_depth_weights)
        raise ValueError(f"the model's cross_layer is {cross_layer!r}: a depth-weight map needs a method that weighs "
                         f"its depth sources per token ({mapped})")
    return method.step_sources(model.config)


@torch.no_grad()
def depth_weight_map(model, batches: Iterable[torch.Tensor]) -> tuple[np.ndarray, int]:
    """(D x D float64 matrix, averaged positions per row) over `batches` of input ids (B, T).

    Every (sample, KV head, token) counts once; row l is the mean depth-weight vector of layer l spread over
    its sources' columns and its own (the diagonal)."""
    sources = step_sources(model)
    depth = len(sources)
    sums = np.zeros((depth, depth), dtype=np.float64)
    count = 0
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    for input_ids in batches:
        out = model(input_ids=input_ids.to(device), use_cache=False, output_depth_weights=True, logits_to_keep=1)
        mixing_steps = [step for step in range(depth) if sources[step]]
        if out.depth_weights is None or len(out.depth_weights) != len(mixing_steps):
            raise ValueError(f"the model returned no depth weights for its {len(mixing_steps)} layers with sources; "
                             "it needs output_depth_weights support (a depthattn DepthAttentionForCausalLM)")
        batch, seq_len = input_ids.shape
        positions = None
        for step, weights in zip(mixing_steps, out.depth_weights, strict=True):
            if weights.shape[-1] != len(sources[step]) + 1:
                raise ValueError(f"layer {step}: {weights.shape[-1]} depth weights for {len(sources[step])} sources "
                                 "and itself")
            positions = weights.shape[0] * weights.shape[1] * weights.shape[2]  # samples x KV heads x tokens
            totals = weights.double().sum(dim=(0, 1, 2)).cpu().numpy()  # (|S(l)| + 1,)
            sums[step, sources[step]] += totals[:-1]
            sums[step, step] += totals[-1]
        count += positions if positions is not None else batch * seq_len
    model.train(was_training)
    if count == 0:
        raise ValueError("no tokens to average over; pass at least one sample")
    matrix = sums / count
    for step, step_source in enumerate(sources):
        if not step_source:  # no sources: the layer keeps its own value
            matrix[step, step] = 1.0
    return matrix, count


def sample_windows(num_tokens: int, samples: int, seq_len: int) -> list[int]:
    """Start positions of `samples` windows of `seq_len` tokens spread evenly over a split of `num_tokens`."""
    if samples < 1 or seq_len < 1:
        raise ValueError(f"--samples and --seq-len must be >= 1, got {samples} and {seq_len}")
    if num_tokens < seq_len:
        raise ValueError(f"the split has {num_tokens:,} tokens, fewer than one sample of --seq-len {seq_len}; "
                         "lower --seq-len or use a larger split")
    return np.linspace(0, num_tokens - seq_len, samples).round().astype(int).tolist()


def compute_depth_map(
    model_dir: str | os.PathLike,
    data: str | os.PathLike,
    *,
    split: str = "val",
    samples: int = DEFAULT_SAMPLES,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dtype: str = "float32",
    device: str | None = None,
) -> dict:
    """The depth-weight map of the model in `model_dir` on `samples` windows of `seq_len` tokens of a prepared split."""
    opened = open_model(model_dir, dtype=dtype, device=device, with_tokenizer=False)
    model, model_path = opened.model, opened.path
    sources = step_sources(model)
    max_positions = model.config.max_position_embeddings
    if seq_len > max_positions:
        raise ValueError(f"--seq-len {seq_len} exceeds the model's max_position_embeddings ({max_positions}); "
                         f"pass --seq-len {max_positions} or less")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    shards = TokenShards(data, split)
    check_data_vocab(shards, model, data)
    if holds_tokenizer(model_path):
        check_data_tokenizer(shards, data, find_tokenizer(model_path))
    starts = sample_windows(len(shards), samples, seq_len)
    batches = (torch.from_numpy(np.stack([shards.read(s, seq_len) for s in starts[i:i + batch_size]]))
               for i in range(0, len(starts), batch_size))
    matrix, count = depth_weight_map(model, batches)
    config = model.config
    return {
        "matrix": matrix.tolist(),
        "axes": "rows: target layer, columns: source layer (the diagonal: the weight of the layer's own value)",
        "sources": {str(step): s for step, s in enumerate(sources)},
        "num_hidden_layers": config.num_hidden_layers,
        "num_loops": getattr(config, "num_loops", 1),
        "cross_layer": config.cross_layer,
        **DESCRIPTIONS[config.cross_layer].settings(config),
        "samples": len(starts),
        "seq_len": seq_len,
        "positions_per_layer": count,
        "model": str(model_path),
        "data": str(data),
        "split": split,
        "dtype": model_dtype_name(model),
        **run_metadata(),
    }


def write_depth_map(result: dict, out_dir: str | os.PathLike, title: str | None = None) -> tuple[Path, Path]:
    """depth_map.json (atomic) and depth_map.png in `out_dir`; the figure titled `title`, by default by the map's
    method (its `depth_map_title`)."""
    out_dir = make_folder(out_dir, "--out")
    json_path = out_dir / "depth_map.json"
    atomic_write_json(json_path, result)
    matrix = np.asarray(result["matrix"])
    present = np.eye(len(matrix), dtype=bool)
    for step, step_sources_ in result["sources"].items():
        present[int(step), step_sources_] = True
    if title is None:
        title = DESCRIPTIONS[result["cross_layer"]].depth_map_title.format(**result)
    png_path = plot_depth_map(matrix, out_dir / "depth_map.png", present=present, title=title,
                              loop_length=result["num_hidden_layers"] if result.get("num_loops", 1) > 1 else None)
    return json_path, png_path
