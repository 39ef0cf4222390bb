"""The private transformers names depthattn uses, all in depthattn/compat.py, still mean what it relies on in the
installed transformers (each is also exercised end to end: generate --compile, depthattn serve, the masks)."""

import transformers
from transformers import CompileConfig

import depthattn
from depthattn import compat
from tests.helpers import tiny_model


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
    assert getattr(transformers, "DepthAttentionForCausalLM") is depthattn.DepthAttentionForCausalLM
    from transformers.cli.serving import model_manager

    assert "getattr(transformers, config.architectures[0])" in open(model_manager.__file__).read()


def test_the_server_internals_exist():
    from transformers.cli.serve import Serve

    names = Serve.__init__.__code__.co_names
    assert "_model_manager" in names and "_generation_state" in names
