"""Every command that loads a model folder refuses missing, unexpected, mis-shaped or non-finite tensors and foreign
model types, naming them; `open_model`, through which they all load one, gives what `load_model` and
`find_tokenizer` give, and refuses what they refuse with the same message."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from depthattn.checksums import write_checksums
from depthattn.cli import main
from depthattn.loading import find_tokenizer, load_model, open_model
from tests.faults.conftest import damage

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


def test_open_model_gives_the_model_and_tokenizer_of_load_model_and_find_tokenizer(model_dir):
    opened = open_model(model_dir, device="cpu")
    model, tokenizer = load_model(model_dir, device="cpu"), find_tokenizer(model_dir)
    assert opened.path == model_dir and type(opened.model) is type(model) and not opened.model.training
    assert opened.model.config.to_dict() == model.config.to_dict()
    assert opened.model.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in opened.model.state_dict().items())
    assert opened.tokenizer.get_vocab() == tokenizer.get_vocab()
    assert opened.max_positions == 64 and opened.default_context_length() == 64  # no training run around it
    later = open_model(model_dir, device="cpu", with_tokenizer=False)
    assert later.tokenizer is None
    assert later.load_tokenizer().get_vocab() == tokenizer.get_vocab() and later.tokenizer is not None


@pytest.mark.parametrize("fault, message", [
    ("damaged", "is damaged: model.safetensors differs from its sha256 (checksums.json); use an intact copy"),
    ("nan", f"holds NaN or infinite weights in {Q_PROJ}: the run that wrote it diverged; use an earlier checkpoint"),
])
def test_open_model_refuses_a_damaged_folder_as_load_model_does(model_dir, fault, message):
    if fault == "nan":
        edit_weights(model_dir, lambda weights: weights[Q_PROJ].fill_(float("nan")))
    else:
        write_checksums(model_dir)
        damage(model_dir / "model.safetensors", "flip a byte")
    with pytest.raises(ValueError) as loaded:
        load_model(model_dir, device="cpu")
    with pytest.raises(ValueError) as opened:
        open_model(model_dir, device="cpu")
    assert message in str(opened.value) and str(opened.value) == str(loaded.value)


def test_open_model_looks_for_the_tokenizer_before_reading_the_weights(model_dir):
    edit_weights(model_dir, lambda weights: weights.pop(Q_PROJ))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model_dir / name).unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError, match=f"no tokenizer in {model_dir}; pass --tokenizer DIR"):
        open_model(model_dir, device="cpu")
    with pytest.raises(ValueError, match=f"tensors missing: {Q_PROJ}"):
        open_model(model_dir, device="cpu", with_tokenizer=False)
