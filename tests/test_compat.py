"""The private transformers names depthattn uses, all in depthattn/compat.py (and compat_light.py, and
serving/transformers_serve.py for transformers' server), still mean what
it relies on in the installed transformers (each is also exercised end to end: generate --compile, depthattn serve,
the masks)."""

import copy
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from transformers import CompileConfig

import depthattn
from depthattn import compat
from tests.helpers import tiny_config, tiny_model


def test_config_generation_keys():
    assert {"do_sample", "temperature", "num_beams", "max_length"} <= compat.config_generation_keys()
    depthattn.DepthAttentionConfig(num_beams=4)  # a generation key, never mistaken for a typo of num_loops


def test_compile_on_any_device_sets_transformers_switch():
    config = CompileConfig()
    assert config._compile_all_devices is not True  # off by default: the switch still exists under this name
    assert compat.compile_on_any_device(config)._compile_all_devices is True


def test_attn_implementation_reads_and_copies_without_touching_the_model():
    model = tiny_model()
    assert compat.attn_implementation(model.config) == model.config._attn_implementation == "sdpa"
    eager = compat.with_attn_implementation(model.config, "eager")
    assert compat.attn_implementation(eager) == "eager" and compat.attn_implementation(model.config) == "sdpa"


def test_transformers_serve_finds_the_class_by_its_architecture_name():
    tiny_config()  # transformers serve reads config.json first: the first config registers the model
    assert transformers.DepthAttentionForCausalLM is depthattn.DepthAttentionForCausalLM
    from transformers.cli.serving import model_manager

    assert "getattr(transformers, config.architectures[0])" in Path(model_manager.__file__).read_text()


def test_the_server_internals_exist():
    from transformers.cli.serving.model_manager import ModelManager

    from depthattn.serving.transformers_serve import engine_in_own_process

    if engine_in_own_process():  # 5.25 on: the parts Serve.run builds its app from, and the engine's loader
        import inspect

        from transformers.cli.serve import Serve
        from transformers.cli.serving.model_manager import EngineClient, ModelLoader
        from transformers.cli.serving.server import build_server

        run = inspect.getsource(Serve.run)
        for part in ("ModelManager(", "ChatCompletionHandler(", "CompletionHandler(", "ResponseHandler(",
                     "TranscriptionHandler(", "SystemOneHandler(", "build_server("):
            assert part in run, part
        assert list(inspect.signature(build_server).parameters)[:2] == ["model_manager", "chat_handler"]
        assert "loader.load_model_and_processor" in inspect.getsource(EngineClient.start_process)
        assert {"fatal_error", "processor", "generation_config"} <= set(EngineClient.__init__.__code__.co_names)
        assert "on_progress" in inspect.signature(ModelLoader.load_model_and_processor).parameters
    else:
        from transformers.cli.serve import Serve

        names = Serve.__init__.__code__.co_names
        assert "_model_manager" in names and "_generation_state" in names
        assert ModelManager.process_model_name("org/model") == "org/model@main"  # the key of loaded models


# what differs between the supported releases: the same surface at both ends of the range


def test_the_cache_is_the_output_field_generate_reads_and_forward_takes_either_name():
    from transformers.modeling_outputs import BaseModelOutputWithPast

    assert compat.CACHE_NAME in BaseModelOutputWithPast.__dataclass_fields__
    model, ids = tiny_model(), torch.randint(0, 97, (1, 6))
    with torch.no_grad():
        out = model(ids[:, :5], use_cache=True)
        assert out.cache is getattr(out, compat.CACHE_NAME) is not None
        by_new_name = model(ids[:, 5:], cache=copy.deepcopy(out.cache), use_cache=True).logits
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated where transformers says `cache`
            by_old_name = model(ids[:, 5:], past_key_values=out.cache, use_cache=True).logits
    torch.testing.assert_close(by_old_name, by_new_name, rtol=0, atol=0)


def test_slice_logits_to_keep():
    hidden = torch.arange(24.0).view(2, 4, 3)
    assert torch.equal(compat.slice_logits_to_keep(hidden, 0), hidden)
    assert torch.equal(compat.slice_logits_to_keep(hidden, 1), hidden[:, -1:])
    assert torch.equal(compat.slice_logits_to_keep(hidden, torch.tensor([0, 2])), hidden[:, [0, 2]])
    per_row = torch.tensor([[3], [1]])
    assert torch.equal(compat.slice_logits_to_keep(hidden, per_row), torch.stack([hidden[0, 3:], hidden[1, 1:2]]))
    mask = torch.tensor([[True, False, False, True], [False, False, False, True]])  # packed rows: flattened
    assert torch.equal(compat.slice_logits_to_keep(hidden, mask), hidden[[0, 0, 1], [0, 3, 3]])


def test_output_recorder_keeps_the_fields_transformers_has():
    from transformers.utils.output_capturing import OutputRecorder

    recorder = compat.output_recorder(torch.nn.Linear, index=1, num_hidden_layers_key="unrolled_depth")
    assert recorder.index == 1
    has_key = "num_hidden_layers_key" in OutputRecorder.__dataclass_fields__
    assert getattr(recorder, "num_hidden_layers_key", None) == ("unrolled_depth" if has_key else None)


def test_both_checkpointing_entry_points_reach_the_models_checks():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gradient_checkpointing_enable is deprecated since 5.23
        for enable in ("activation_checkpointing_enable", "gradient_checkpointing_enable"):
            model = tiny_model()
            with pytest.raises(ValueError, match="use_reentrant=True"):
                getattr(model, enable)({"use_reentrant": True})
            getattr(model, enable)()
            assert all(layer.gradient_checkpointing for layer in model.model.layers)


def test_hub_kernels_are_never_reached(tmp_path, monkeypatch):
    """5.25 turns Hub kernels on by default where the `kernels` package is installed: loading a depthattn folder, and
    converting a Qwen3 one (whose RMSNorm transformers maps to a Hub kernel), must not reach for the network."""
    pytest.importorskip("kernels", reason="needs the kernels package (the dev extra installs it)")
    import socket

    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from depthattn import DepthAttentionForCausalLM
    from depthattn.loading import load_model

    connections = []

    def refuse(sock, address, *args, **kwargs):
        connections.append(address)
        raise OSError("no network in this test")

    tiny_model().save_pretrained(tmp_path / "depthattn")
    qwen3 = Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8)).eval()
    qwen3.save_pretrained(tmp_path / "qwen3")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    loaded = load_model(tmp_path / "depthattn")
    converted = DepthAttentionForCausalLM.from_pretrained_decoder(tmp_path / "qwen3", cross_layer="vanilla").eval()
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "depthattn")  # as a user loads it, kernels on by default
    ids = torch.randint(0, 97, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, qwen3(ids).logits)
        torch.testing.assert_close(plain(ids).logits, loaded(ids).logits)
    assert connections == [] and not loaded.use_kernels and not converted.use_kernels
