"""`depthattn depth-map`: the (target x source) mean depth-weight matrix, checked against docs/method.md by hand."""

import argparse
import json

import numpy as np
import pytest
import torch

from depthattn.commands import depth_map as depth_map_command
from depthattn.evaluate import depth_map
from depthattn.evaluate.depth_map import compute_depth_map, depth_weight_map, step_sources, write_depth_map
from depthattn.methods import register, unregister
from depthattn.methods.depth_attention import depth_sources, resolved_depth_stride
from tests.helpers import registered_toy, tiny_model
from tests.methods.toy_method import ToyValueGain


def batches(vocab_size, sizes=((2, 12), (3, 12), (1, 12)), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, size, generator=generator) for size in sizes]


@torch.no_grad()
def hand_map(model, inputs) -> np.ndarray:
    """docs/method.md#the-operation, step 3, from captured q/k: softmax over S(l) + {l} of
    (mean of the group's query heads) . k / sqrt(d).

    q and k are taken after their RMSNorm and before RoPE: at one position both carry the same rotation, so the
    score is the same. Weights are averaged over samples, KV heads and tokens."""
    config = model.config
    depth = config.num_hidden_layers * config.num_loops
    stride, window = resolved_depth_stride(config), config.depth_window
    groups = config.num_attention_heads // config.num_key_value_heads
    sums, count = np.zeros((depth, depth)), 0
    for ids in inputs:
        queries, keys = [], []  # per unrolled step, in call order: (B, T, H, d)
        hooks = [m.register_forward_hook(lambda _m, _i, out, store=store: store.append(out.double()))
                 for layer in model.model.layers
                 for m, store in ((layer.self_attn.q_norm, queries), (layer.self_attn.k_norm, keys))]
        model(ids)
        for hook in hooks:
            hook.remove()
        for step in range(depth):
            candidates = depth_sources(step, stride, window) + [step]
            q = queries[step].unflatten(2, (config.num_key_value_heads, groups)).mean(3)  # (B, T, Hkv, d)
            scores = torch.stack([(q * keys[j]).sum(-1) for j in candidates], -1) / config.head_dim ** 0.5
            weights = torch.softmax(scores, -1)  # (B, T, Hkv, n)
            sums[step, candidates] += weights.sum((0, 1, 2)).numpy()
        count += ids.numel() * config.num_key_value_heads
    return sums / count


@pytest.mark.parametrize("settings", [
    dict(num_hidden_layers=6, depth_stride=2),
    dict(num_hidden_layers=5, depth_stride=3, depth_window=1),
    dict(num_hidden_layers=3, depth_stride=1, num_loops=2),
])
def test_depth_map_matches_a_hand_computation(settings):
    model = tiny_model(**settings)
    inputs = batches(model.config.vocab_size)
    matrix, count = depth_weight_map(model, inputs)
    assert count == sum(ids.numel() for ids in inputs) * model.config.num_key_value_heads
    np.testing.assert_allclose(matrix, hand_map(model, inputs), atol=1e-6)


def test_rows_sum_to_one_with_zeros_where_there_is_no_source():
    model = tiny_model(num_hidden_layers=8, depth_stride=3)
    matrix, _ = depth_weight_map(model, batches(model.config.vocab_size))
    sources = step_sources(model)
    assert sources[4] == [0, 3] and sources[7] == [0, 3, 6]
    assert matrix.shape == (8, 8)
    np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-9)
    for target, row in enumerate(matrix):
        present = set(sources[target]) | {target}
        assert all(row[j] == 0 for j in range(8) if j not in present)
        assert all(0 < row[j] < 1 for j in present) or target == 0
    assert matrix[0, 0] == 1.0


def test_error_for_a_model_without_depth_attention(eval_data, tmp_path):
    vanilla = tiny_model(cross_layer="vanilla", vocab_size=384)
    vanilla.save_pretrained(tmp_path / "vanilla")
    with pytest.raises(ValueError, match=r"cross_layer is 'vanilla'.*needs a method that weighs its depth sources "
                                         r"per token \(depth_attention\)"):
        compute_depth_map(tmp_path / "vanilla", eval_data, samples=2, seq_len=8)


def test_depth_map_command_writes_json_and_png(trained_model, eval_data, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    depth_map_command.add_arguments(parser)
    out = tmp_path / "map"
    args = parser.parse_args([str(trained_model), "--data", str(eval_data), "--samples", "6", "--seq-len", "32",
                              "--batch-size", "4", "--out", str(out)])
    assert depth_map_command.run(args) == 0
    assert "target layer" in capsys.readouterr().out
    result = json.loads((out / "depth_map.json").read_text())
    matrix = np.asarray(result["matrix"])
    assert matrix.shape == (4, 4) and result["sources"] == {"0": [], "1": [0], "2": [0], "3": [0, 2]}
    np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-9)
    assert matrix[3, 1] == 0 and matrix[0, 0] == 1
    assert result["samples"] == 6 and result["seq_len"] == 32 and result["positions_per_layer"] == 6 * 32 * 2
    assert {"depthattn_version", "date", "model", "data", "split"} <= result.keys()
    assert result["cross_layer"] == "depth_attention" and result["depth_stride"] == 2
    png = (out / "depth_map.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        compute_depth_map(trained_model, eval_data, samples=1, seq_len=1024)


class MappedToy(ToyValueGain):
    """The toy, weighing its two candidates (layer 0's value, its own) per token: a depth map of its own."""

    config_fields = {}  # the toy's field stays the toy's (registered beside it)
    maps_depth_weights = True
    depth_map_title = "Toy gains ({samples} x {seq_len} tokens)"

    def forward(self, attention, query, state, step, states):
        state, _ = super().forward(attention, query, state, step, states)
        share = torch.sigmoid(query.mean(1, keepdim=True).sum(-1, keepdim=True))  # (B, 1, T, 1) from the tokens
        weights = torch.cat([share, 1 - share], -1).expand(*state.value.shape[:3], 2)
        return state, weights


def test_any_method_that_weighs_its_depth_sources_has_a_depth_map_titled_by_it(tmp_path, monkeypatch):
    titles = []
    monkeypatch.setattr(depth_map, "plot_depth_map", lambda matrix, path, title, **kwargs: titles.append(title))
    with registered_toy():
        register("mapped_toy", MappedToy)
        try:
            model = tiny_model(cross_layer="mapped_toy", num_hidden_layers=3)
            matrix, count = depth_weight_map(model, batches(97))
            assert step_sources(model) == [[], [0], [0]]
            assert count == 6 * 12 * 2  # samples x KV heads x tokens, per row
            result = {"matrix": matrix.tolist(), "sources": {"0": [], "1": [0], "2": [0]}, "num_hidden_layers": 3,
                      "num_loops": 1, "cross_layer": "mapped_toy", "samples": 6, "seq_len": 12}
            write_depth_map(result, tmp_path / "toy")
        finally:
            unregister("mapped_toy")
    np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-9)
    assert matrix[1, 2] == matrix[2, 1] == 0 and 0 < matrix[2, 0] < 1
    write_depth_map({**result, "cross_layer": "depth_attention", "depth_stride": 2}, tmp_path / "depth")
    assert titles == ["Toy gains (6 x 12 tokens)", "Depth-Attention weights (6 x 12 tokens, stride 2)"]


@pytest.mark.parametrize("matrix, scale", [([[1.0, 0.0], [0.3, 0.7]], (0.0, 1.0)),
                                           ([[1.0, 0.0], [1.8, -0.5]], (-0.5, 1.8))])  # a linear mix's free weights
def test_the_colour_scale_holds_every_weight(tmp_path, monkeypatch, matrix, scale):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from depthattn.evaluate.plots import plot_depth_map

    shown, imshow = [], Axes.imshow

    def recorded(self, data, **kwargs):
        shown.append((kwargs["vmin"], kwargs["vmax"]))
        return imshow(self, data, **kwargs)

    monkeypatch.setattr(Axes, "imshow", recorded)
    plot_depth_map(np.array(matrix), tmp_path / "map.png")
    assert shown == [scale] and (tmp_path / "map.png").stat().st_size > 0


def test_without_matplotlib_the_command_stops_before_running_the_model(tmp_path, monkeypatch, capsys):
    """It ran the model and wrote depth_map.json, then failed at the figure: a new JSON beside an older PNG."""
    from depthattn.cli import main
    from depthattn.evaluate import plots

    def missing():
        raise ImportError("plots need matplotlib: pip install 'depthattn[plot]'")

    monkeypatch.setattr(plots, "pyplot", missing)
    assert main(["depth-map", str(tmp_path / "no-model"), "--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "plots need matplotlib" in capsys.readouterr().err and not (tmp_path / "o" / "depth_map.json").exists()
