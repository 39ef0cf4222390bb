"""`depthattn convert` on a broken source folder: one clear line naming the file and the fix, no traceback, no
OUT_DIR; `from_pretrained_decoder` raises the same errors."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from depthattn import DepthAttentionForCausalLM
from depthattn.checksums import CHECKSUMS, checksum_problems, edited_files
from depthattn.cli import main

# head_dim is set apart from hidden_size / num_attention_heads, so that each field changes its own tensors
LLAMA = dict(vocab_size=64, hidden_size=32, head_dim=16, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Llama folder as transformers saves it (read only: copy it to change it)."""
    folder = tmp_path_factory.mktemp("convert") / "llama"
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).save_pretrained(folder)
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.fixture
def src(llama_dir, tmp_path):
    shutil.copytree(llama_dir, tmp_path / "src")
    return tmp_path / "src"


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def convert_fails(src, out, capsys, *options) -> str:
    """The one line `depthattn convert` prints on stderr, after checking that it failed without a traceback and
    wrote nothing."""
    assert main(["convert", str(src), str(out), *options]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(".")]
    return err


@pytest.mark.parametrize("text, message", [
    ("", "config.json is empty; fix it or restore the original file"),
    ("  \n", "config.json is empty"),
    ('{"model_type": "llama",\n', "config.json is not valid JSON (line 2, column 1"),
    ("[1, 2]", "config.json holds a JSON list, not an object"),
    ('{"hidden_size": 32}', "config.json names no model_type"),
])
def test_a_broken_config_is_named_in_one_line(src, tmp_path, capsys, text, message):
    (src / "config.json").write_text(text)
    err = convert_fails(src, tmp_path / "out", capsys)
    assert f"depthattn convert: error: {src / 'config.json'}" in err and message in err


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=48), "model.embed_tokens.weight has shape (64, 32) in the checkpoint but (64, 48) from "
                           "{config} hidden_size=48 ("),
    (dict(num_attention_heads=8), "model.layers.0.self_attn.q_proj.weight has shape (64, 32) in the checkpoint but "
                                  "(128, 32) from {config} num_attention_heads=8, head_dim=16 (3 more"),
    (dict(num_key_value_heads=4), "k_proj.weight has shape (32, 32) in the checkpoint but (64, 32) from {config} "
                                  "num_key_value_heads=4, head_dim=16"),
    (dict(head_dim=8), "q_proj.weight has shape (64, 32) in the checkpoint but (32, 32) from {config} "
                       "num_attention_heads=4, head_dim=8"),
    (dict(intermediate_size=40), "mlp.gate_proj.weight has shape (48, 32) in the checkpoint but (40, 32) from "
                                 "{config} intermediate_size=40"),
    (dict(vocab_size=80), "model.embed_tokens.weight has shape (64, 32) in the checkpoint but (80, 32) from "
                          "{config} vocab_size=80"),
])
def test_a_config_that_does_not_describe_the_weights_names_tensor_shapes_and_field(src, tmp_path, capsys, changes,
                                                                                   message):
    edit_config(src, **changes)
    err = convert_fails(src, tmp_path / "out", capsys)
    assert message.format(config=src / "config.json") in err
    assert "the config does not describe these weights; fix config.json (hidden_size" in err
    assert "ignore_mismatched_sizes" not in err
    with pytest.raises(ValueError, match="the config does not describe these weights"):  # the library's error too
        DepthAttentionForCausalLM.from_pretrained_decoder(src)


@pytest.mark.parametrize("layers", [1, 3])
def test_another_number_of_layers_is_named(src, tmp_path, capsys, layers):
    edit_config(src, num_hidden_layers=layers)
    err = convert_fails(src, tmp_path / "out", capsys)
    assert f"the checkpoint holds 2 layers but {src / 'config.json'} has num_hidden_layers={layers}: the config " \
           "does not describe these weights; fix config.json (num_hidden_layers)" in err


def test_a_norm_of_another_size_names_head_dim(src, tmp_path, capsys):
    edit_config(src, model_type="qwen3", architectures=["Qwen3ForCausalLM"])  # q_norm / k_norm of head_dim
    weights = src / "model.safetensors"
    tensors = load_file(weights)
    for layer in range(LLAMA["num_hidden_layers"]):
        for norm in ("q_norm", "k_norm"):
            tensors[f"model.layers.{layer}.self_attn.{norm}.weight"] = torch.ones(8)
    save_file(tensors, weights, metadata={"format": "pt"})
    err = convert_fails(src, tmp_path / "out", capsys)
    assert "model.layers.0.self_attn.q_norm.weight has shape (8,) in the checkpoint but (16,) from" in err
    assert "config.json head_dim=16" in err


def test_tensors_the_config_does_not_name_are_one_line_on_the_real_stderr(src, tmp_path):
    """Run as a user runs it: transformers' load report (which calls such tensors ignorable) and its progress bars,
    which capsys does not see, stay off."""
    weights = load_file(src / "model.safetensors")
    save_file({**weights, "model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}, src / "model.safetensors",
              metadata={"format": "pt"})
    done = subprocess.run([sys.executable, "-m", "depthattn", "convert", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"depthattn convert: error: the tensors of {src} do not match its config: missing [], unexpected "
        "['model.layers.0.self_attn.q_proj.bias']"], done.stderr


def test_missing_weights_and_folders_are_one_line(src, tmp_path, capsys):
    (src / "model.safetensors").unlink()
    err = convert_fails(src, tmp_path / "out", capsys)
    assert f"{src} holds no weights (model.safetensors" in err and "copy the model's weights files into it" in err

    err = convert_fails(tmp_path / "nowhere", tmp_path / "out", capsys)
    assert f"{tmp_path / 'nowhere'} is not a directory: it does not exist; pass the folder" in err

    (src / "config.json").unlink()
    err = convert_fails(src, tmp_path / "out", capsys)
    assert f"{src} is not a directory holding a saved model (config.json)" in err


def test_a_truncated_or_garbled_weights_file_is_named(src, tmp_path, capsys):
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    err = convert_fails(src, tmp_path / "out", capsys)
    assert f"{weights} is not a readable safetensors file (" in err and "damaged or cut short; copy it again" in err
    weights.write_bytes(b"garbage")
    assert "is not a readable safetensors file" in convert_fails(src, tmp_path / "out", capsys)


def test_a_missing_shard_is_named(src, tmp_path, capsys):
    (src / "model.safetensors").rename(src / "model-00001-of-00002.safetensors")
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}))
    err = convert_fails(src, tmp_path / "out", capsys)
    assert "lacks model-00002-of-00002.safetensors, named in model.safetensors.index.json" in err


def test_an_unknown_family_is_one_line(src, tmp_path, capsys):
    edit_config(src, model_type="gpt2")
    assert "cannot convert model_type 'gpt2'; supported: LlamaForCausalLM" in convert_fails(src, tmp_path / "out",
                                                                                            capsys)


def test_a_setting_the_method_does_not_read_is_named_with_its_method(src, tmp_path, capsys):
    err = convert_fails(src, tmp_path / "out", capsys, "--cross-layer", "vanilla", "--depth-stride", "1",
                        "--hc-streams", "2")
    assert ("--depth-stride, --hc-streams: a setting of depth_attention, hyper_connections, which "
            "cross_layer='vanilla' does not read") in err
    assert "--moda-impl: a setting of moda, which cross_layer='depth_attention'" in convert_fails(
        src, tmp_path / "out", capsys, "--moda-impl", "reference")  # the default method


def test_the_converted_folder_records_its_checksums(src, tmp_path, capsys):
    assert main(["convert", str(src), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    recorded = json.loads((out / CHECKSUMS).read_text())["sha256"]
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(recorded)
    assert checksum_problems(out) == [] and edited_files(out) == []
    assert "warning" not in capsys.readouterr().err
