"""`depthattn convert`: a Llama, Mistral, Qwen2, Qwen3 or reference Depth-Attention checkpoint into a
depthattn model folder."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ..config import METHODS
from ..convert import TOKENIZER_FILES
from ..files import atomic_directory, check_checksums, write_checksums
from ..methods.depth_attention import DEPTH_MIX_RULES
from ..modeling import DepthAttentionForCausalLM


def add_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("src", metavar="SRC_DIR", help="a Llama, Mistral, Qwen2 or Qwen3 model folder, or a "
                                                       "Depth-Attention reference-implementation checkpoint")
    parser.add_argument("out", metavar="OUT_DIR", help="the converted model folder (must not exist)")
    parser.add_argument("--cross-layer", choices=METHODS,
                        help="default: a reference checkpoint's own method, else depth_attention")
    parser.add_argument("--depth-stride", type=int, help="default: a reference checkpoint's, else half the depth")
    parser.add_argument("--depth-window", type=int)
    parser.add_argument("--depth-mix", choices=DEPTH_MIX_RULES)
    parser.add_argument("--depth-score-bias", action="store_true", default=None,
                        help="add the learned score bias (docs/method.md#variants)")
    parser.add_argument("--depth-self-bias-init", type=float,
                        help="with --depth-score-bias: initial bias of each layer's own entry; 30 starts the "
                             "converted model as the source (docs/method.md#retrofitting)")


def run(args: argparse.Namespace) -> int:
    src, out = Path(args.src), Path(args.out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it or choose another OUT_DIR")
    names = ("cross_layer", "depth_stride", "depth_window", "depth_mix", "depth_score_bias", "depth_self_bias_init")
    settings = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    check_checksums(src)  # where SRC_DIR records them (a depthattn folder)
    model = DepthAttentionForCausalLM.from_pretrained_decoder(src, **settings)
    with atomic_directory(out) as tmp:
        model.save_pretrained(tmp)
        for item in src.iterdir():
            if item.is_file() and (item.name.startswith("tokenizer") or item.name in TOKENIZER_FILES):
                shutil.copy(item, tmp / item.name)
        write_checksums(tmp)
    config = model.config
    print(f"{out}: cross_layer={config.cross_layer}" + (
        f", depth_stride={config.resolved_depth_stride}, depth_window={config.depth_window}"
        if config.cross_layer == "depth_attention" else ""))
    return 0
