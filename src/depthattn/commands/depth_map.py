"""`depthattn depth-map`: the mean depth weight per (target, source) layer of a model, as JSON and PNG (the
paper's Fig. 3)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..files import check_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..evaluate.depth_map import DEFAULT_BATCH_SIZE, DEFAULT_SAMPLES, DEFAULT_SEQ_LEN
    from ..loading import DTYPE_CHOICES

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
    from ..evaluate.depth_map import compute_depth_map, write_depth_map
    from ..evaluate.plots import pyplot
    from ..loading import quiet_loading_bars

    quiet_loading_bars()
    check_output(args.out, folder=True)
    pyplot()  # before the model is run: without matplotlib the JSON was written beside an older PNG, then an error
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
