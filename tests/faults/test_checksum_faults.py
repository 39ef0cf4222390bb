"""checksums.json guards a model folder against damage, not edits: damaged or truncated weights are refused, text
files edited since (a chat template added to the tokenizer) load with one warning, and `depthattn checksums`
records them again once the weights are checked."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from depthattn.checksums import CHECKSUMS, edited_files, write_checksums
from depthattn.cli import main
from depthattn.convert import load_backbone
from depthattn.data.tokenizer import load_tokenizer
from depthattn.loading import load_model
from tests.faults.conftest import damage as damage_weights
from tests.helpers import tiny_model

TEMPLATE = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"


@pytest.fixture
def model_dir(model_dir):
    """The tiny model folder with checksums.json, as train writes final/."""
    write_checksums(model_dir)
    return model_dir


def add_chat_template(folder):
    tokenizer = load_tokenizer(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def generate(folder) -> list:
    return ["generate", str(folder), "ROMEO.", "--max-new-tokens", "4", "--temperature", "0"]


def test_an_added_chat_template_loads_with_one_warning(model_dir, capsys):
    add_chat_template(model_dir)
    assert main(generate(model_dir)) == 0
    (warning,) = warnings(capsys.readouterr().err)
    assert f"warning: {model_dir}: text files changed since checksums.json was recorded: " in warning
    assert "tokenizer_config.json (differs)" in warning and "chat_template.jinja (new)" in warning
    assert "the weights match theirs and load as usual" in warning
    assert warning.endswith(f"to record the files as they are now: depthattn checksums {model_dir}")
    assert load_tokenizer(model_dir).chat_template == TEMPLATE
    load_model(model_dir, device="cpu")  # the library loads it too, and does not warn again
    assert warnings(capsys.readouterr().err) == []


def test_an_edited_config_that_still_fits_loads_with_a_warning(model_dir, capsys):
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "use_cache": False}, indent=1))
    (model_dir / "generation_config.json").unlink()
    load_model(model_dir, device="cpu")
    (warning,) = warnings(capsys.readouterr().err)
    assert "config.json (differs)" in warning and "generation_config.json (missing)" in warning


@pytest.mark.parametrize("damage", ["truncate", "flip a byte"])
def test_damaged_weights_are_refused(model_dir, capsys, damage):
    damage_weights(model_dir / "model.safetensors", damage)
    assert main(generate(model_dir)) == 1
    err = capsys.readouterr().err
    assert f"{model_dir} is damaged: model.safetensors differs from its sha256 (checksums.json); use an intact copy" \
        in err and warnings(err) == []
    with pytest.raises(ValueError, match="model.safetensors differs from its sha256"):
        load_model(model_dir, device="cpu")

    recorded = (model_dir / CHECKSUMS).read_bytes()
    assert main(["checksums", str(model_dir)]) == 1
    assert "so its checksums are not recorded again; use an intact copy" in capsys.readouterr().err
    assert (model_dir / CHECKSUMS).read_bytes() == recorded


def test_the_checksums_command_records_edited_files(model_dir, capsys):
    add_chat_template(model_dir)
    assert main(["checksums", str(model_dir)]) == 0
    out = capsys.readouterr()
    assert f"{model_dir}: checksums.json records the files as they are now (changed: " in out.out
    assert "tokenizer_config.json (differs)" in out.out
    assert out.err == "" and edited_files(model_dir) == []
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]  # written atomically, nothing left over
    assert main(generate(model_dir)) == 0
    assert warnings(capsys.readouterr().err) == []

    assert main(["checksums", str(model_dir)]) == 0
    assert "(nothing had changed)" in capsys.readouterr().out


def test_the_checksums_command_refuses_nonfinite_weights(model_dir, capsys):
    weights = load_file(model_dir / "model.safetensors")
    weights["model.layers.0.self_attn.q_proj.weight"].fill_(float("nan"))
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    write_checksums(model_dir)  # as a diverged run records them
    recorded = (model_dir / CHECKSUMS).read_bytes()
    assert main(["checksums", str(model_dir)]) == 1
    err = capsys.readouterr().err
    assert "holds NaN or infinite weights in model.layers.0.self_attn.q_proj.weight" in err
    assert (model_dir / CHECKSUMS).read_bytes() == recorded


def test_a_config_json_that_breaks_is_still_an_error(model_dir, capsys):
    config = (model_dir / "config.json").read_text()
    (model_dir / "config.json").write_text(config[:-20])
    assert main(generate(model_dir)) == 1
    assert f"{model_dir / 'config.json'} is not valid JSON (line" in capsys.readouterr().err
    assert main(["checksums", str(model_dir)]) == 1
    assert "is not valid JSON (line" in capsys.readouterr().err

    (model_dir / "config.json").write_text(json.dumps({**json.loads(config), "num_attention_heads": 2}))
    assert main(generate(model_dir)) == 1
    err = capsys.readouterr().err
    assert "config.json (differs)" in warnings(err)[0]
    assert "do not fit its config.json, tensors of the wrong shape" in err
    assert "config.json num_attention_heads=2, head_dim=8 does not describe these weights" in err
    recorded = (model_dir / CHECKSUMS).read_bytes()
    assert main(["checksums", str(model_dir)]) == 1
    assert "config.json num_attention_heads=2, head_dim=8 (" in capsys.readouterr().err
    assert (model_dir / CHECKSUMS).read_bytes() == recorded


@pytest.mark.parametrize("field, value", [("num_hidden_layers", "two"), ("num_hidden_layers", 0),
                                          ("rms_norm_eps", "abc")])
def test_a_config_json_value_of_the_wrong_kind_is_named(model_dir, capsys, field, value):
    """Named before the tokenizer is loaded (transformers' tokenizer reads config.json too, and its own check of
    layer_types against the layer count would be a traceback)."""
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, field: value}))
    assert main(generate(model_dir)) == 1
    err = capsys.readouterr().err
    assert f"config.json is not a valid depthattn config ({field} must be" in err and "Traceback" not in err


def test_an_unreadable_checksums_file_is_refused_until_deleted(model_dir, capsys):
    (model_dir / CHECKSUMS).write_text("{")
    assert main(generate(model_dir)) == 1
    assert "is damaged: checksums.json is unreadable" in capsys.readouterr().err
    assert main(["checksums", str(model_dir)]) == 1
    assert f"delete it and run depthattn checksums {model_dir} again" in capsys.readouterr().err
    (model_dir / CHECKSUMS).unlink()
    assert main(["checksums", str(model_dir)]) == 0
    assert main(generate(model_dir)) == 0
    assert warnings(capsys.readouterr().err) == []


def test_init_from_warns_about_edited_files_and_refuses_damaged_weights(model_dir, capsys):
    add_chat_template(model_dir)
    model = tiny_model(vocab_size=384, max_position_embeddings=64, depth_stride=2)
    load_backbone(model, model_dir)
    assert "tokenizer_config.json (differs)" in warnings(capsys.readouterr().err)[0]
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(ValueError, match="model.init_from: .* is damaged: model.safetensors differs"):
        load_backbone(model, model_dir)


def test_the_weights_still_load_as_saved(model_dir):
    """Edited text files change nothing of the model."""
    before = load_model(model_dir, device="cpu").state_dict()
    add_chat_template(model_dir)
    after = load_model(model_dir, device="cpu").state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
