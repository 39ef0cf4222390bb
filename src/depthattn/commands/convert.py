"""`depthattn convert`: a Llama, Mistral, Qwen2, Qwen3 or reference Depth-Attention checkpoint into a
depthattn model folder."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from ..checksums import check_checksums, write_checksums
from ..config import method_fields
from ..convert import TOKENIZER_FILES, config_from_decoder, read_decoder_config
from ..files import atomic_directory, check_output
from ..methods import DESCRIPTIONS


def add_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("src", metavar="SRC_DIR", help="a Llama, Mistral, Qwen2 or Qwen3 model folder, or a "
                                                       "Depth-Attention reference-implementation checkpoint")
    parser.add_argument("out", metavar="OUT_DIR", help="the converted model folder (must not exist)")
    parser.add_argument("--cross-layer", choices=DESCRIPTIONS,
                        help="default: a reference checkpoint's own method, else depth_attention")
    fields = parser.add_argument_group(
        "method settings", "any registered method's config field (docs/method.md); default: a reference "
        "checkpoint's own, else the method's default; a value is read as TOML (2, 0.5, true, \"uniform\" or uniform)")
    for name, field in method_fields().items():
        switch = isinstance(field.default, bool)  # --depth-score-bias alone means true
        fields.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_reader(field.default), metavar="VALUE",
                            nargs="?" if switch else None, const=True if switch else None,
                            help=_first_sentence(field.doc).replace("%", "%%") + f" (default {field.default!r})")


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[a-z)`])\. (?=[A-Z`])", text)[0].rstrip(".")


def _reader(default):
    """parse_literal, with an integer taken as a float where the field's default is one (30 -> 30.0)."""
    def read(text: str):
        from ..train.config import parse_literal

        value = parse_literal(text)
        return float(value) if isinstance(default, float) and type(value) is int else value
    return read


def run(args: argparse.Namespace) -> int:
    from ..loading import quiet_loading_bars
    from ..modeling import DepthAttentionForCausalLM

    quiet_loading_bars()

    src, out = Path(args.src), Path(args.out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it or choose another OUT_DIR")
    check_output(out, "OUT_DIR", folder=True)
    names = ("cross_layer", *method_fields())
    settings = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    check_checksums(src)  # where SRC_DIR records them (a depthattn folder)
    method = config_from_decoder(read_decoder_config(src), **settings).cross_layer  # before loading any weights
    unread = [name for name in settings if name != "cross_layer" and name not in DESCRIPTIONS[method].config_fields]
    if unread:
        owners = {name: owner for owner, described in DESCRIPTIONS.items() for name in described.config_fields}
        raise ValueError(f"{', '.join('--' + name.replace('_', '-') for name in unread)}: a setting of "
                         f"{', '.join(sorted({owners[name] for name in unread}))}, which cross_layer={method!r} does "
                         "not read; leave it out, or pass --cross-layer with the method it belongs to")
    model = DepthAttentionForCausalLM.from_pretrained_decoder(src, **settings)
    with atomic_directory(out) as tmp:
        model.save_pretrained(tmp)
        for item in src.iterdir():
            if item.is_file() and (item.name.startswith("tokenizer") or item.name in TOKENIZER_FILES):
                shutil.copy(item, tmp / item.name)
        write_checksums(tmp)
    config = model.config
    settings = DESCRIPTIONS[config.cross_layer].settings(config)
    print(", ".join([f"{out}: cross_layer={config.cross_layer}", *(f"{k}={v!r}" for k, v in settings.items())]))
    return 0
