"""`depthattn.evaluate.costs`: the paper's 3B cost table, parameter counts of built models, and the analytic FLOPs
against torch.utils.flop_counter.FlopCounterMode on small models, exactly (tests/methods/test_conformance.py checks
every registered method within a tolerance).

What is compared with FlopCounterMode (per token, method model minus the vanilla model with the same backbone;
tests/helpers.py counts):
- matmul-like ops: exactly the `model_flops_per_token["matmul"]` of each setting below;
- elementwise ops: for Depth-Attention and value residual in the full model, exactly the analytic elementwise FLOPs plus
  the operations the paper's convention leaves out (named in the tests); for the hidden-state methods, the mixing
  arithmetic in the full model with the mixing weights held fixed (so that norms, softmax, sigmoid and Sinkhorn,
  which the paper does not count, do not run), exactly the analytic "mix" terms.
"""

import argparse
import json

import pytest
import torch

import depthattn
from depthattn.commands import costs as costs_command
from depthattn.evaluate import costs
from depthattn.methods import METHODS
from depthattn.train import MODEL_PRESETS

from ..helpers import ELEMENTWISE, FLOP_BATCH, FLOP_SEQ, MATMUL, extra_flops_per_token, tiny_config

# small settings for every method: GQA (tiny_config: 4 heads, 2 KV heads), several strides, loops, options
# the paper's Table 2: (extra FLOPs/token, extra I/O/token, extra state at a 128K prefill), 3B config.
PAPER_TABLE_3B = {
    "depth_attention": ("2.40e5", "282 KiB", "0 GiB"),
    "denseformer": ("5.01e6", "4.97 MiB", "24.0 GiB"),
    "attnres": ("4.26e6", "4.44 MiB", "4.0 GiB"),
    "mhc": ("4.72e7", "8.63 MiB", "1.5 GiB"),
}

SETTINGS = {
    "depth_attention": dict(cross_layer="depth_attention"),
    "depth_every_window": dict(cross_layer="depth_attention", depth_stride=1, num_hidden_layers=3),
    "depth_stride3_window1": dict(cross_layer="depth_attention", depth_stride=3, depth_window=1, num_hidden_layers=5),
    "depth_uniform": dict(cross_layer="depth_attention", depth_mix="uniform"),
    "depth_mix_kv": dict(cross_layer="depth_attention", depth_mix_states="kv"),
    "depth_mix_k": dict(cross_layer="depth_attention", depth_mix_states="k"),
    "depth_looped": dict(cross_layer="depth_attention", num_hidden_layers=2, num_loops=3),
    "depth_linear_every": dict(cross_layer="depth_attention", depth_mix="linear", depth_stride=1),
    "value_residual": dict(cross_layer="value_residual"),
    "value_residual_looped": dict(cross_layer="value_residual", num_hidden_layers=2, num_loops=2),
    "value_embeddings": dict(cross_layer="value_embeddings"),
    "value_embeddings_pattern": dict(cross_layer="value_embeddings", value_embedding_pattern="0..1"),
    "denseformer": dict(cross_layer="denseformer"),
    "denseformer_k2p2": dict(cross_layer="denseformer", denseformer_dilation=2, denseformer_period=2),
    "denseformer_looped": dict(cross_layer="denseformer", num_hidden_layers=2, num_loops=2),
    "attnres": dict(cross_layer="attnres", attnres_block_size=3),
    "attnres_looped": dict(cross_layer="attnres", attnres_block_size=5, num_hidden_layers=2, num_loops=2),
    "mhc": dict(cross_layer="mhc", mhc_streams=3),
    "mhc_looped": dict(cross_layer="mhc", num_hidden_layers=2, num_loops=2),
    "hyper_connections": dict(cross_layer="hyper_connections", hc_streams=3),
    "hyper_connections_n1_looped": dict(cross_layer="hyper_connections", hc_streams=1, num_hidden_layers=2,
                                        num_loops=2),
    "mudd": dict(cross_layer="mudd"),
    "mudd_looped": dict(cross_layer="mudd", num_hidden_layers=2, num_loops=2),
    # MoDA's sequence part in SDPA, as vanilla's (the counter does not count CPU SDPA; the reference's matmuls it would)
    "moda": dict(cross_layer="moda", moda_impl="merged"),
    "moda_looped": dict(cross_layer="moda", moda_impl="merged", num_hidden_layers=2, num_loops=2),
}
DEPTH = [k for k, v in SETTINGS.items() if v["cross_layer"] == "depth_attention"]
VALUE = [k for k, v in SETTINGS.items() if v["cross_layer"] in ("value_residual", "value_embeddings")]
HIDDEN = [k for k, v in SETTINGS.items() if k not in DEPTH + VALUE and v["cross_layer"] != "moda"]


# ---------------------------------------------------------------------------------------------------------------
# the paper's Table 2


def _printed(value: float, paper: str, kind: str) -> str:
    """`value` printed the way the paper prints `paper` (same unit, same number of decimals)."""
    if kind == "flops":
        return costs.format_flops(value)
    number, unit = paper.split()
    decimals = len(number.split(".")[1]) if "." in number else 0
    scaled = value / 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)
    return f"{scaled:.{decimals}f} {unit}"


@pytest.fixture(scope="module")
def table_3b():
    configs = costs.method_configs(MODEL_PRESETS["3b"])
    return {r["method"]: r for r in costs.costs_table(configs, context=131072, dtype_bytes=2)}


@pytest.mark.parametrize("method", list(PAPER_TABLE_3B))
def test_paper_table_3b(table_3b, method):
    record = table_3b[method]
    flops, io, state = PAPER_TABLE_3B[method]
    assert _printed(record["extra_flops_per_token"], flops, "flops") == flops
    assert _printed(record["extra_io_bytes_per_token"], io, "bytes") == io
    assert _printed(record["extra_state_bytes_at_context"], state, "bytes") == state


def test_table_3b_details(table_3b):
    da = table_3b["depth_attention"]
    # docs/method.md#inference: sum (|S(l)| + 1)
    assert da["depth_candidates_total"] == 117 and da["depth_sources_total"] == 70
    assert da["extra_flops_per_token"] == 4 * 117 * 512
    assert f"{100 * da['extra_flops_fraction_of_2n']:.3f}" == "0.004"  # docs/method.md#inference: 0.004% of 2N
    assert table_3b["denseformer"]["params_extra"] == 48 * 51 // 2  # L(L+3)/2
    for record in table_3b.values():
        assert record["kv_cache_bytes_per_token"] == 2 * 48 * 8 * 64 * 2  # vanilla's cache for every method
        assert record["kv_cache_bytes_at_context"] == record["kv_cache_bytes_per_token"] * 131072
    for name in ("vanilla", "depth_attention", "value_residual"):
        assert table_3b[name]["extra_state_bytes_at_context"] == 0
    assert table_3b["vanilla"]["extra_flops_per_token"] == table_3b["vanilla"]["extra_io_bytes_per_token"] == 0
    # where the paper's AttnRes accounting differs from our model's structure (see the costs docstring)
    attnres = table_3b["attnres"]
    assert attnres["extra_flops_per_token"] == 4 * 2048 * 520
    assert attnres["model_flops_per_token"]["total"] == 4 * 2048 * 528


def test_3b_parameters_match_the_built_models(table_3b):
    for name, config in costs.method_configs(MODEL_PRESETS["3b"]).items():
        with torch.device("meta"):
            counts = depthattn.count_parameters(depthattn.DepthAttentionForCausalLM(config))
        assert (table_3b[name]["params_total"], table_3b[name]["params_extra"]) == (
            counts["total"], counts["extra_over_vanilla"]), name


# ---------------------------------------------------------------------------------------------------------------
# parameters of built small models


@pytest.mark.parametrize("overrides", [dict(cross_layer="vanilla", tie_word_embeddings=True, attention_bias=True),
                                       dict(cross_layer="mhc", tie_word_embeddings=True)])
def test_total_parameters_of_tied_and_biased_backbones(overrides):
    """Every method's own count is checked in tests/methods/test_conformance.py; here the backbone's options."""
    model = depthattn.DepthAttentionForCausalLM(tiny_config(**overrides))
    assert costs.method_costs(model.config)["params_total"] == depthattn.count_parameters(model)["total"]


# ---------------------------------------------------------------------------------------------------------------
# FLOPs against FlopCounterMode


@pytest.mark.parametrize("name", list(SETTINGS))
def test_matmul_flops_match_flop_counter(name):
    record = costs.method_costs(tiny_config(**SETTINGS[name]))
    assert extra_flops_per_token(SETTINGS[name], MATMUL) == record["model_flops_per_token"]["matmul"]


@pytest.mark.parametrize("name", DEPTH)
def test_depth_attention_elementwise_flops_match_flop_counter(name):
    config = tiny_config(**SETTINGS[name])
    record = costs.method_costs(config)
    assert record["model_flops_per_token"]["matmul"] == 0
    # what the counter sees on top of the paper's convention, per step with sources (n candidates): the group mean
    # of the query heads (Hq * head_dim inputs) and the 1/sqrt(d) scaling of the Hkv * n scores (softmax only)
    sources = METHODS[config.cross_layer].step_sources(config)
    uncounted = 0
    if config.depth_mix == "softmax":
        uncounted = sum(config.num_attention_heads * config.head_dim + config.num_key_value_heads * (len(s) + 1)
                        for s in sources if s)
    counted = extra_flops_per_token(SETTINGS[name], ELEMENTWISE, ops=set(ELEMENTWISE))
    assert counted == record["model_flops_per_token"]["elementwise"] + uncounted
    assert record["model_flops_per_token"]["total"] == record["extra_flops_per_token"]


@pytest.mark.parametrize("name", VALUE)
def test_value_residual_elementwise_flops_match_flop_counter(name):
    config = tiny_config(**SETTINGS[name])
    record = costs.method_costs(config)
    d_kv = config.num_key_value_heads * config.head_dim
    # a 2-term weighted sum counts 2 * 2 d_kv by convention; the model runs 2 multiplies and 1 add
    counted = extra_flops_per_token(SETTINGS[name], ELEMENTWISE, ops=set(ELEMENTWISE))
    mixed_steps = sum(depthattn.methods.METHODS[config.cross_layer](config).acts_at(u)
                      for u in range(config.unrolled_depth))
    assert counted == record["model_flops_per_token"]["elementwise"] - d_kv * mixed_steps


def _fix_mixing_weights(method):
    """Replace the method's weight computation by fixed weights (computed here, outside the counter)."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(FLOP_BATCH, FLOP_SEQ, *shape, generator=generator)

    if isinstance(method, depthattn.methods.AttnRes):
        fixed = {n: rand(n).permute(2, 0, 1) for n in range(1, 64)}
        method.weights = lambda candidates, sublayer: fixed[candidates.shape[0]]
    elif isinstance(method, depthattn.methods.MUDD):
        fixed = {(C, n): rand(C, n) for C in (1, 4) for n in range(2, 64)}
        method.weights = lambda x, block: fixed[tuple(method.block_parameters(block)[2].shape)]
    elif isinstance(method, depthattn.methods.streams.MultiStreamResidual):
        n = method.num_streams
        fixed = (rand(n), rand(n), rand(n, n))
        method.coefficients = lambda x, sublayer: fixed


@pytest.mark.parametrize("name", HIDDEN)
def test_hidden_state_mixing_flops_match_flop_counter(name):
    config = tiny_config(**SETTINGS[name])
    record = costs.method_costs(config)
    mixing = sum(t["flops"] for t in record["flop_terms"] if t["model"] and t["role"] == "mix")
    if config.cross_layer in ("mhc", "hyper_connections"):
        # the multi-stream write replaces vanilla's residual add (D per sublayer), which the convention keeps
        mixing -= 2 * config.unrolled_depth * config.hidden_size
    if config.cross_layer == "mudd":
        # the keys' and values' own inputs pass the attention norm too (mean D, 2 D multiplies, + eps), in every
        # block but the first; norms are not counted
        mixing += 2 * (config.unrolled_depth - 1) * (3 * config.hidden_size + 1)
    counted = extra_flops_per_token(SETTINGS[name], {**MATMUL, **ELEMENTWISE}, patch=_fix_mixing_weights)
    assert counted == mixing
    assert record["model_flops_per_token"]["total"] == sum(t["flops"] for t in record["flop_terms"] if t["model"])


# ---------------------------------------------------------------------------------------------------------------
# other properties


def test_value_residual_costs_as_depth_attention_uniform_from_layer_0():
    """At initialisation value residual is Depth-Attention with uniform weights and layer 0 as only source."""
    value = costs.method_costs(tiny_config(cross_layer="value_residual", num_hidden_layers=6))
    depth = costs.method_costs(tiny_config(cross_layer="depth_attention", depth_mix="uniform", depth_stride=6,
                                           num_hidden_layers=6))
    for key in ("extra_flops_per_token", "extra_io_bytes_per_token", "extra_state_bytes_at_context"):
        assert value[key] == depth[key], key


def test_loops_scale_the_unrolled_depth():
    flat = costs.method_costs(tiny_config(cross_layer="mhc", num_hidden_layers=4), context=100)
    looped = costs.method_costs(tiny_config(cross_layer="mhc", num_hidden_layers=2, num_loops=2), context=100)
    for key in ("params_extra", "extra_io_bytes_per_token", "kv_cache_bytes_per_token", "extra_state_bytes_at_context"):
        assert flat[key] == looped[key], key
    assert flat["params_total"] > looped["params_total"]  # the looped backbone has half the layers


def test_state_at_context():
    T, D = 1000, 32
    d_kv = 2 * 8

    def state(**overrides):
        return costs.method_costs(tiny_config(**overrides), context=T, dtype_bytes=4)["extra_state_bytes_at_context"]

    assert state(cross_layer="denseformer") == 4 * T * D * 4
    assert state(cross_layer="denseformer", denseformer_dilation=2, denseformer_period=2) == 2 * T * D * 4
    assert state(cross_layer="attnres", attnres_block_size=3) == 3 * T * D * 4  # snapshots at 0, 3, 6
    assert state(cross_layer="mhc", mhc_streams=3) == 2 * T * D * 4
    assert state(cross_layer="depth_attention") == 0
    assert state(cross_layer="value_embeddings") == 0
    assert state(cross_layer="mudd") == (4 + 3) * T * D * 4  # X_0 .. X_3 and the q, k, v ways
    # mixed keys: the plain key of a mixed source layer (layer 2 of 4, stride 2) is not in the cache
    assert state(cross_layer="depth_attention", depth_mix_states="kv") == 1 * T * d_kv * 4


def test_value_embedding_parameters_grow_with_the_vocabulary():
    small, large = (costs.method_costs(tiny_config(cross_layer="value_embeddings", vocab_size=v)) for v in (97, 970))
    assert large["params_extra"] - small["params_extra"] == 2 * (970 - 97) * 16  # "0101": two tables of d_kv = 16
    assert small["value_embedding_tables"] == 2 and small["value_embedding_steps"] == [0, 1, 2, 3]


def test_costs_list_every_registered_method(tmp_path):
    from tests.methods.toy_method import ToyValueGain

    depthattn.methods.register("toy", ToyValueGain)
    try:
        assert costs.default_methods()[-1] == "toy"
        records = costs.costs_table(costs.method_configs(MODEL_PRESETS["tiny"]))
        assert [r["method"] for r in records] == list(depthattn.methods.METHODS)
    finally:
        depthattn.methods.unregister("toy")


def test_formatting():
    assert costs.format_flops(239616) == "2.40e5" and costs.format_flops(0) == "0"
    assert costs.format_bytes(288768) == "282 KiB"
    assert costs.format_bytes(5210112) == "4.97 MiB"
    assert costs.format_bytes(24 * 2**30) == "24.0 GiB"
    assert costs.format_bytes(0, unit="GiB") == "0 GiB"


def _args(argv):
    return costs_command.add_arguments(argparse.ArgumentParser()).parse_args(argv)


def test_cli_preset_writes_json(tmp_path, capsys):
    out = tmp_path / "costs" / "3b.json"
    assert costs_command.run(_args(["--preset", "3b", "--out", str(out)])) == 0
    records = json.loads(out.read_text())
    assert [r["method"] for r in records] == costs.default_methods()
    printed = capsys.readouterr().out
    for method, (flops, io, _) in PAPER_TABLE_3B.items():
        row = next(line for line in printed.splitlines() if line.startswith(f"| {method} "))
        assert flops in row and io in row


def test_cli_training_config(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('[model]\npreset = "tiny"\nmethod = "depth_quarter"\nnum_loops = 2\n'
                      '[model.overrides]\nvocab_size = 384\n')
    out = tmp_path / "costs.json"
    assert costs_command.run(_args(["--config", str(config), "--methods", "vanilla,depth_quarter,mhc",
                            "--context", "2048", "--dtype-bytes", "4", "--out", str(out)])) == 0
    records = {r["method"]: r for r in json.loads(out.read_text())}
    assert list(records) == ["vanilla", "depth_quarter", "mhc"]
    assert records["depth_quarter"]["unrolled_depth"] == 8 and records["depth_quarter"]["context"] == 2048
    settings = dict(MODEL_PRESETS["tiny"], vocab_size=384, **depthattn.method_settings("depth_quarter", 4, 2))
    assert records["depth_quarter"] == costs.method_costs(depthattn.DepthAttentionConfig(**settings), 2048, 4,
                                                          name="depth_quarter")
    assert costs_command.run(_args(["--config", str(config)])) == 0  # default rows plus the config's own method
    assert "| depth_quarter " in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown method"):
        costs_command.run(_args(["--preset", "tiny", "--methods", "nope"]))


def test_cli_training_config_prices_its_datas_vocabulary_or_says_which_it_assumes(tiny_data, tmp_path, capsys):
    vocab = json.loads((tiny_data / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    config, out = tmp_path / "run.toml", tmp_path / "costs.json"
    config.write_text(f'[model]\npreset = "tiny"\nmethod = "vanilla"\n[data]\npath = "{tiny_data}"\n')
    assert costs_command.run(_args(["--config", str(config), "--methods", "vanilla", "--out", str(out)])) == 0
    settings = dict(MODEL_PRESETS["tiny"], vocab_size=vocab, **depthattn.method_settings("vanilla", 4))
    assert json.loads(out.read_text()) == [costs.method_costs(depthattn.DepthAttentionConfig(**settings),
                                                              name="vanilla")]
    assert f"vocabulary: {vocab:,} tokens, the tokenizer of {tiny_data}" in capsys.readouterr().out
    config.write_text(f'[model]\npreset = "tiny"\n[data]\npath = "{tmp_path / "unprepared"}"\n')
    assert costs_command.run(_args(["--config", str(config), "--methods", "vanilla"])) == 0
    assert (f"vocabulary: 50,304 tokens assumed (the paper's), as {tmp_path / 'unprepared'} is not prepared yet: "
            "prepare it (depthattn prepare), or pass --vocab-size N") in capsys.readouterr().out
