"""Every command that loads a model folder refuses missing, unexpected, mis-shaped or non-finite tensors and foreign
model types, naming them."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from depthattn.cli import main

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"


def edit_weights(folder, edit):
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def loader_argv(loader, folder, data, tmp_path):
    return {"eval": ["eval", str(folder), "--data", str(data), "--no-progress"],
            "generate": ["generate", str(folder), "ROMEO."],
            "depth-map": ["depth-map", str(folder), "--data", str(data), "--seq-len", "8",
                          "--out", str(tmp_path / "map")],
            "harness": ["harness", str(folder), "--tasks", "depthattn_shakespeare_mc", "--limit", "2"]}[loader]


@pytest.mark.parametrize("loader", ["eval", "generate", "depth-map", "harness"])
def test_every_loader_refuses_a_missing_tensor(model_dir, tiny_data, tmp_path, capsys, loader):
    if loader == "harness":
        pytest.importorskip("lm_eval")
    edit_weights(model_dir, lambda weights: weights.pop(Q_PROJ))
    assert main(loader_argv(loader, model_dir, tiny_data, tmp_path)) == 1
    assert f"do not fit its config.json, tensors missing: {Q_PROJ}" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda w: w.update({"extra.weight": torch.zeros(3)}), "tensors unexpected: extra.weight"),
    (lambda w: w.update({Q_PROJ: torch.zeros(5, 5)}), f"tensors of the wrong shape: {Q_PROJ} (5, 5) (needs (32, 32))"),
    (lambda w: w[Q_PROJ].fill_(float("nan")), f"holds NaN or infinite weights in {Q_PROJ}: the run that wrote it"),
])
def test_wrong_tensors_are_named(model_dir, tiny_data, tmp_path, capsys, edit, message):
    edit_weights(model_dir, edit)
    assert main(loader_argv("eval", model_dir, tiny_data, tmp_path)) == 1
    assert message in capsys.readouterr().err


def test_a_foreign_model_type_is_refused(model_dir, tiny_data, tmp_path, capsys):
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    assert main(loader_argv("eval", model_dir, tiny_data, tmp_path)) == 1
    assert "holds a 'bert' model, not a depthattn one" in capsys.readouterr().err
