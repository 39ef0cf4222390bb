"""A new cross-layer method is one module plus one registry line: it trains, decodes with a cache, has costs, saves
and loads, and owns its config field (the toy method of toy_method.py)."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from depthattn import METHOD_PRESETS, DepthAttentionConfig
from depthattn.cli import main
from depthattn.config import ConfigField, method_fields
from depthattn.evaluate.costs import method_costs
from depthattn.methods import (
    INFERENCE_STATE,
    METHODS,
    AttentionMixer,
    CrossLayerMethod,
    NoExtraCost,
    Residual,
    count_parameters,
    register,
    unregister,
)
from depthattn.serving.vllm import check_servable
from depthattn.study import Study, run_study, write_report
from depthattn.study.pricing import run_flops
from depthattn.study.store import CellStore
from depthattn.train import TrainConfig, train

from ..helpers import prefill_then_decode, tiny_config, tiny_model
from ..study.test_study import write_study
from .toy_method import ToyValueGain


@pytest.fixture
def toy():
    register("toy", ToyValueGain)
    yield "toy"
    unregister("toy")


def test_toy_method_trains_and_reloads(toy, tiny_data, tmp_path):
    cfg = TrainConfig.load(None, [
        "--data.path", str(tiny_data), "--data.seq_len", "16", "--train.out_dir", str(tmp_path / "run"),
        "--train.batch_size", "2", "--train.steps", "3", "--train.eval_every", "3", "--train.eval_batches", "1",
        "--train.checkpoint_every", "3", "--train.progress", "false", "--optim.warmup_steps", "1",
        "--model.method", toy, "--model.overrides.num_hidden_layers", "2",  # a preset under its own name
    ])
    train(cfg)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    gains = model.model.cross_layer.gains.weight
    assert model.config.cross_layer == "toy" and gains.shape == (1, 1) and gains.abs().sum() > 0  # trained


def test_toy_method_decodes_with_a_cache_and_has_costs(toy, tmp_path):
    model = tiny_model(cross_layer=toy)
    with torch.no_grad():
        model.model.cross_layer.gains.weight.uniform_(-1, 1)
    ids = torch.randint(0, 97, (2, 9))
    full = model(ids).logits
    cached, _ = prefill_then_decode(model, ids, 4)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)
    assert not torch.allclose(full, tiny_model(cross_layer="vanilla")(ids).logits)

    costs = method_costs(tiny_config(cross_layer=toy))
    assert costs["params_extra"] == count_parameters(model)["extra_over_vanilla"] == 3
    assert costs["extra_flops_per_token"] == 2 * 2 * 8 * 3 and costs["extra_state_bytes_at_context"] == 0

    model.save_pretrained(tmp_path / "toy")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "toy")
    torch.testing.assert_close(reloaded(ids).logits, full, rtol=0, atol=0)


def test_toy_method_owns_its_config_field(toy, tmp_path):
    config = tiny_config(cross_layer=toy, toy_gain_init=0.25)
    assert tiny_config().toy_gain_init == 0.0  # every config has every registered method's fields
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["toy_gain_init"] == 0.25
    assert DepthAttentionConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()
    assert (AutoModelForCausalLM.from_config(config).model.cross_layer.gains.weight == 0.25).all()  # a submodule's
    with pytest.raises(ValueError, match="toy_gain_init must be a finite number, got nan"):
        tiny_config(toy_gain_init=float("nan"))
    with pytest.raises(ValueError, match="did you mean 'toy_gain_init'"):
        tiny_config(toy_gain_int=0.5)


def test_register_then_unregister_leaves_no_trace():
    before = dict(METHODS), dict(INFERENCE_STATE), method_fields(), dict(METHOD_PRESETS)
    register("toy", ToyValueGain)
    unregister("toy")
    assert (dict(METHODS), dict(INFERENCE_STATE), method_fields(), dict(METHOD_PRESETS)) == before
    assert "toy_gain_init" not in tiny_config().to_dict()
    config = tiny_config(toy_gain_init=0.5)  # now an attribute like any a tool adds, no field of a method
    assert "toy_gain_init" not in method_fields() and config.toy_gain_init == 0.5
    with pytest.raises(ValueError, match="names cross_layer='toy', a method not installed here"):
        tiny_config(cross_layer="toy")
    clash = type("Clash", (ToyValueGain,), {"config_fields": {"depth_stride": ConfigField(1, "taken")}})
    with pytest.raises(ValueError, match=r"another method has: \['depth_stride'\]"):
        register("clash", clash)
    assert "clash" not in METHODS


def test_register_refuses_a_method_that_does_not_declare_its_costs():
    silent = type("Silent", (CrossLayerMethod,), {})  # every cost member left to the base class
    with pytest.raises(ValueError, match=r"Silent \(cross_layer='silent'\) does not declare its costs: define the "
                                         "classmethods extra_parameters, flop_terms, io_elements, extra_state_elements"
                                         ".*NoExtraCost"):
        register("silent", silent)
    partial = type("Partial", (CrossLayerMethod,), {"extra_parameters": classmethod(lambda cls, config: 0)})
    with pytest.raises(ValueError, match="define the classmethods flop_terms, io_elements, extra_state_elements"):
        register("partial", partial)
    assert "silent" not in METHODS and "partial" not in METHODS
    register("free", type("Free", (NoExtraCost, CrossLayerMethod), {}))  # says it adds nothing
    try:
        assert method_costs(tiny_config(cross_layer="free"))["extra_flops_per_token"] == 0
    finally:
        unregister("free")
    with pytest.raises(NotImplementedError, match="Silent does not declare its costs"):
        silent.flop_terms(tiny_config())


def test_register_refuses_a_method_without_its_familys_required_hooks():
    sourceless = type("Sourceless", (NoExtraCost, AttentionMixer), {})
    with pytest.raises(ValueError, match=r"Sourceless \(cross_layer='sourceless'\) does not define step_sources"):
        register("sourceless", sourceless)
    half = type("Half", (NoExtraCost, Residual), {"init": lambda self, embeds: embeds})
    with pytest.raises(ValueError, match="does not define final, hidden, read, write, which its family requires"):
        register("half", half)
    both = type("Both", (ToyValueGain, Residual), {"config_fields": {}})
    with pytest.raises(ValueError, match="Both derives from both AttentionMixer and Residual"):
        register("both", both)
    assert not {"sourceless", "half", "both"} & set(METHODS)


def test_vllm_serves_or_refuses_a_registered_method_by_its_own_hooks(toy):
    check_servable(tiny_config(cross_layer=toy), ranks=2)  # no file names the toy, yet vLLM's check lets it through

    class Unservable(ToyValueGain):
        config_fields = {}  # the toy's field stays the toy's
        vllm_refusal = "its gains live on another planet"

    class Unsaid(ToyValueGain):  # acts inside the softmax, where the vLLM model never calls it, and does not say so
        config_fields = {}

        def attend(self, attention_fn, module, query, key, value, mask, step, states, position_embeddings, **kwargs):
            return attention_fn(module, query, key, value, mask, **kwargs)

    for name, method, refusal in (
            ("toy_unservable", Unservable, "its gains live on another planet; vLLM serves vanilla, .*toy[,.]"),
            ("toy_unsaid", Unsaid, "its module defines attend, which the vLLM model does not call")):
        register(name, method)
        try:
            with pytest.raises(ValueError, match=f"cross_layer='{name}' cannot be served by vLLM .*{refusal}"):
                check_servable(tiny_config(cross_layer=name), ranks=1)
        finally:
            unregister(name)
    config = tiny_config(cross_layer="depth_attention")
    with pytest.raises(ValueError, match=f"tensor_parallel_size={config.num_key_value_heads + 1} > num_key_value"):
        check_servable(config, ranks=config.num_key_value_heads + 1)  # a method's own sharding rule
    with pytest.raises(ValueError, match="cannot be served by vLLM.*residual stream"):
        check_servable(tiny_config(cross_layer="mhc"), ranks=1)


def test_convert_takes_every_registered_method_field(toy, tmp_path, capsys):
    tiny_model(cross_layer="vanilla").save_pretrained(tmp_path / "src")
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "out"), "--cross-layer", toy,
                 "--toy-gain-init", "1"]) == 0
    assert "cross_layer=toy, toy_gain_init=1.0" in capsys.readouterr().out
    assert DepthAttentionConfig.from_pretrained(tmp_path / "out").toy_gain_init == 1.0


def test_toy_method_runs_in_a_study_and_its_report(toy, tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla", toy)))
    run_study(study, CellStore.of(study))
    results = CellStore.of(study).read_results(study)
    assert sorted((r.method, r.seed) for r in results) == [(toy, 0), (toy, 1), ("vanilla", 0), ("vanilla", 1)]
    assert all(r.params_extra == 1 for r in results if r.method == toy)  # 2 layers: one gain
    text = write_report(study, CellStore.of(study)).read_text()
    assert f"| {toy} | 2 |" in text and run_flops(study, {}, toy)["flops"] > run_flops(study, {}, "vanilla")["flops"]
