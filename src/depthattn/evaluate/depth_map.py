"""`depthattn depth-map`: how much each layer draws on each earlier layer (the paper's Fig. 3).

Forward passes with `output_depth_weights=True` give, per layer l with sources (per unrolled step of a looped model),
weights (B, Hkv, T, |S(l)| + 1) over the layer's sources S(l) and itself (last). Averaged over batch rows
(samples), KV heads and tokens, they make row l of a D x D matrix (D = num_hidden_layers * num_loops):
entry (l, j) is the mean weight layer l gives to source j, (l, l) the weight it keeps for its own value.
Every row sums to 1; entries for layers that are not sources are 0; layer 0 (no sources) is 1 on the diagonal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from ..methods import DepthAttention
from .loading import DTYPE_CHOICES, check_data_vocab, check_model_dir, load_model, model_dtype_name, run_metadata

DEFAULT_SAMPLES = 16
DEFAULT_SEQ_LEN = 256
DEFAULT_BATCH_SIZE = 4


def step_sources(model) -> list[list[int]]:
    """Depth sources of every unrolled step (`DepthAttention.step_sources`)."""
    config = model.config
    if getattr(config, "cross_layer", None) != "depth_attention":
        raise ValueError(f"the model's cross_layer is {getattr(config, 'cross_layer', None)!r}: a depth-weight map "
                         "needs a Depth-Attention model (cross_layer='depth_attention')")
    return DepthAttention.step_sources(config)


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
        for step, weights in zip(mixing_steps, out.depth_weights):
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
    from ..data.shards import TokenShards

    model_path = check_model_dir(model_dir)
    model = load_model(model_path, dtype, device)
    sources = step_sources(model)
    max_positions = model.config.max_position_embeddings
    if seq_len > max_positions:
        raise ValueError(f"--seq-len {seq_len} exceeds the model's max_position_embeddings ({max_positions}); "
                         f"pass --seq-len {max_positions} or less")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    shards = TokenShards(data, split)
    check_data_vocab(shards, model, data)
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
        "depth_stride": config.resolved_depth_stride,
        "depth_window": config.depth_window,
        "depth_mix": config.depth_mix,
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
    """depth_map.json (atomic) and depth_map.png in `out_dir`."""
    from ..files import atomic_write_json
    from .plots import plot_depth_map

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "depth_map.json"
    atomic_write_json(json_path, result)
    matrix = np.asarray(result["matrix"])
    present = np.eye(len(matrix), dtype=bool)
    for step, step_sources_ in result["sources"].items():
        present[int(step), step_sources_] = True
    if title is None:
        title = (f"Depth-Attention weights ({result['samples']} x {result['seq_len']} tokens, "
                 f"stride {result['depth_stride']})")
    png_path = plot_depth_map(matrix, out_dir / "depth_map.png", present=present, title=title,
                              loop_length=result["num_hidden_layers"] if result.get("num_loops", 1) > 1 else None)
    return json_path, png_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL_DIR", help="a saved Depth-Attention model folder")
    parser.add_argument("--data", required=True, metavar="PREPARED_DIR",
                        help="a dataset written by `depthattn prepare`")
    parser.add_argument("--split", default="val", help="split of --data (default %(default)s)")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, metavar="N",
                        help="windows spread evenly over the split (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN, metavar="T",
                        help="tokens per window (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="windows per forward pass (default %(default)s)")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    parser.add_argument("--out", required=True, metavar="DIR", help="writes DIR/depth_map.json and DIR/depth_map.png")


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weights-loading bar
    result = compute_depth_map(args.model, args.data, split=args.split, samples=args.samples, seq_len=args.seq_len,
                               batch_size=args.batch_size, dtype=args.dtype, device=args.device)
    json_path, png_path = write_depth_map(result, args.out)
    matrix = np.asarray(result["matrix"])
    width = len(str(len(matrix) - 1))
    print(f"mean depth weights (row: target layer, column: source layer), {result['samples']} samples x "
          f"{result['seq_len']} tokens:")
    for step, row in enumerate(matrix):
        present = set(result["sources"][str(step)]) | {step}
        cells = " ".join(f"{v:5.3f}" if j in present else "    ." for j, v in enumerate(row[:step + 1]))
        print(f"  {step:>{width}}: {cells}")
    print(f"wrote {json_path} and {png_path}", file=sys.stderr)
    return 0
