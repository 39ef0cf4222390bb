"""Retrofitting (docs/method.md#retrofitting): a saved vanilla model converted to Depth-Attention, opt-in starting
exactly as the vanilla model, and training runs (and study cells) that start from such a saved model."""

import json

import pytest
import torch

from depthattn import DepthAttentionForCausalLM, method_settings
from depthattn.convert import load_backbone
from depthattn.data import TokenShards
from depthattn.evaluate.plots import plot_loss_curves
from depthattn.study import Cell, Study
from depthattn.train import TrainConfig, train
from depthattn.train.loop import build_model_config
from tests.helpers import tiny_model

# with each layer's own score biased by 30, every other depth weight is at most exp(score spread - 30): in float32
# the converted model's logits are the vanilla model's up to rounding
START_ATOL = 1e-5


def test_depth_retrofit_starts_a_converted_vanilla_model_as_it_was(tmp_path):
    vanilla = tiny_model(cross_layer="vanilla")
    vanilla.save_pretrained(tmp_path / "vanilla")
    ids = torch.randint(0, vanilla.config.vocab_size, (2, 12))
    expected = vanilla(ids).logits
    retrofit = DepthAttentionForCausalLM.from_pretrained_decoder(
        tmp_path / "vanilla", **{**method_settings("depth_retrofit", 4), "depth_stride": 1})
    method = retrofit.model.cross_layer
    biases = [method.learned_mix[part].tolist() for part in method.mix_slices.values()]
    assert biases == [[0.0] * n + [30.0] for n in (1, 2, 3)]
    torch.testing.assert_close(retrofit(ids).logits, expected, rtol=0, atol=START_ATOL)
    plain = DepthAttentionForCausalLM.from_pretrained_decoder(vanilla, depth_stride=1)
    assert (plain(ids).logits - expected).abs().max() > 1e-3  # converted as it is, the mixing changes the output


def test_the_self_bias_needs_the_score_bias():
    with pytest.raises(ValueError, match="depth_score_bias=True"):
        tiny_model(depth_self_bias_init=30.0)


def test_a_saved_methods_trained_tensors_go_into_that_method_only(tmp_path):
    """Converting or retrofitting from a method with tensors of its own into another (or the same, shaped otherwise)
    would drop their trained values: refused, naming the method, not blamed on the source's config.json."""
    hyper = tiny_model(cross_layer="hyper_connections").eval()
    hyper.save_pretrained(tmp_path / "hyper")
    (tmp_path / "hyper-bin").mkdir()  # weights in torch's format: checked after loading, not from the headers
    (tmp_path / "hyper-bin" / "config.json").write_bytes((tmp_path / "hyper" / "config.json").read_bytes())
    torch.save(hyper.state_dict(), tmp_path / "hyper-bin" / "pytorch_model.bin")
    refusal = "holds trained tensors of its method .cross_layer='hyper_connections'.*no tensors of its own"
    for source in (tmp_path / "hyper", tmp_path / "hyper-bin", hyper):
        with pytest.raises(ValueError, match=refusal):
            DepthAttentionForCausalLM.from_pretrained_decoder(source, cross_layer="vanilla")
    with pytest.raises(ValueError, match=refusal):
        DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "hyper", cross_layer="hyper_connections",
                                                          hc_streams=2)
    with pytest.raises(ValueError, match=refusal):
        load_backbone(tiny_model(cross_layer="depth_attention"), tmp_path / "hyper")
    same = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "hyper-bin",
                                                             **hyper.config.cross_layer_settings()).eval()
    ids = torch.randint(0, hyper.config.vocab_size, (2, 12))
    torch.testing.assert_close(same(ids).logits, hyper(ids).logits, rtol=0, atol=0)


def run_config(data, out_dir, *overrides):
    base = ["--data.path", str(data), "--data.seq_len", "32", "--train.out_dir", str(out_dir),
            "--train.batch_size", "4", "--train.eval_every", "100", "--train.eval_batches", "1",
            "--train.checkpoint_every", "100", "--train.progress", "false", "--optim.warmup_steps", "2",
            "--optim.lr", "3e-3"]
    return TrainConfig.load(None, base + list(overrides))


def records(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def first_loss(out_dir):
    return next(r["loss"] for r in records(out_dir) if "loss" in r)


def test_a_run_starts_from_a_saved_vanilla_model(tiny_data, tmp_path):
    train(run_config(tiny_data, tmp_path / "vanilla", "--model.method", "vanilla", "--train.steps", "20"))
    saved = tmp_path / "vanilla" / "final"

    cfg = run_config(tiny_data, tmp_path / "retrofit", "--model.method", "depth_retrofit", "--train.steps", "2",
                     "--model.init_from", str(saved))
    shards = TokenShards(tiny_data, "train")
    model = DepthAttentionForCausalLM(build_model_config(cfg, shards.vocab_size, shards.eos_id))
    load_backbone(model, saved)
    vanilla = DepthAttentionForCausalLM.from_pretrained(saved)
    ids = torch.randint(0, 384, (2, 16))
    torch.testing.assert_close(model(ids).logits, vanilla(ids).logits, rtol=0, atol=START_ATOL)

    train(cfg)
    train(run_config(tiny_data, tmp_path / "fresh", "--model.method", "depth_retrofit", "--train.steps", "2"))
    assert first_loss(tmp_path / "retrofit") < first_loss(tmp_path / "fresh") - 0.5  # it did start trained
    # the loss before the first step is recorded, and it is the vanilla model's
    start, vanilla_end = records(tmp_path / "retrofit")[0], records(tmp_path / "vanilla")[-1]
    assert start["step"] == start["tokens"] == 0 and records(tmp_path / "fresh")[0]["step"] == 1  # fresh: none
    assert start["val_loss"] == pytest.approx(vanilla_end["val_loss"], abs=1e-5)
    pytest.importorskip("matplotlib")
    assert plot_loss_curves({"retrofit": tmp_path / "retrofit" / "metrics.jsonl"}, tmp_path / "curves.png").exists()

    other = run_config(tiny_data, tmp_path / "other", "--model.init_from", str(saved),
                       "--model.overrides", "{ num_hidden_layers = 2 }")
    with pytest.raises(ValueError, match="num_hidden_layers is 4 there, 2 here"):
        train(other)
    with pytest.raises(FileNotFoundError, match="holds no saved model"):
        train(run_config(tiny_data, tmp_path / "missing", "--model.init_from", str(tmp_path / "nowhere")))


def test_the_retrofit_study_starts_each_seed_from_the_core_studys_vanilla_cell():  # and trains it if missing
    retrofit, core = Study.load("configs/study/retrofit.toml"), Study.load("configs/study/core.toml")
    for seed in retrofit.seeds:
        cell = retrofit.cell_config(Cell({}, "depth_retrofit", seed))
        assert cell.model.init_from == f"{core.out_dir}/{core.cell_path(Cell({}, 'vanilla', seed))}/final"
        assert cell.model.preset == "tiny" and cell.model.overrides == {"num_hidden_layers": 8}
