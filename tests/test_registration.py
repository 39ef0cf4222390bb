"""`import depthattn` registers the model with transformers' Auto classes without importing transformers' modeling
code: each check runs in a fresh process, where nothing else imported depthattn's model."""

import pickle
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import tiny_config, tiny_model

HEAVY = ("transformers.modeling_utils", "depthattn.modeling")


def run_fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_depthattn_imports_no_modeling_code():
    loaded = run_fresh(f"""
        import sys
        import depthattn
        print([name for name in {HEAVY!r} if name in sys.modules])
        depthattn.DepthAttentionConfig  # the config is eager
        """)
    assert loaded.strip() == "[]"


def test_auto_classes_find_the_model_after_import_depthattn_alone(tmp_path):
    tiny_model().save_pretrained(tmp_path / "model")
    out = run_fresh(f"""
        import depthattn
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

        print(type(AutoConfig.for_model("depth_attention")).__name__)
        config = depthattn.DepthAttentionConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=2, num_attention_heads=4)
        print(type(AutoModelForCausalLM.from_config(config)).__name__)
        print(type(AutoModelForCausalLM.from_pretrained({str(tmp_path / "model")!r})).__name__)
        print(type(AutoModel.from_pretrained({str(tmp_path / "model")!r})).__name__)
        """)
    assert out.split() == ["DepthAttentionConfig", "DepthAttentionForCausalLM", "DepthAttentionForCausalLM",
                           "DepthAttentionModel"]


def test_a_config_unpickled_in_a_fresh_process_finds_its_model_and_methods(tmp_path):
    """What a worker process of a pool gets: a config, never constructed there."""
    (tmp_path / "config.pickle").write_bytes(pickle.dumps(tiny_config(cross_layer="mhc", mhc_streams=3)))
    out = run_fresh(f"""
        import pickle
        import depthattn
        from transformers import AutoModelForCausalLM

        config = pickle.loads(open({str(tmp_path / "config.pickle")!r}, "rb").read())
        config.validate()
        print(config.cross_layer, config.mhc_streams, type(AutoModelForCausalLM.from_config(config)).__name__)
        """)
    assert out.split() == ["mhc", "3", "DepthAttentionForCausalLM"]


def test_public_names_load_at_first_use_and_are_listed():
    import depthattn

    for name in depthattn.__all__:
        assert getattr(depthattn, name) is not None and name in dir(depthattn)
    assert depthattn.DepthAttentionForCausalLM.__module__ == "depthattn.modeling"
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        depthattn.no_such_name  # noqa: B018  (the attribute access is what raises)


def test_transformers_serve_finds_the_class_on_the_package_module_its_server_holds():
    """The server module binds `transformers` before its processor loader imports transformers.processing_utils,
    which replaces that package module in sys.modules; the first config comes after both."""
    out = run_fresh("""
        import sys
        import depthattn
        import transformers as held_by_the_server
        import transformers.processing_utils

        assert sys.modules["transformers"] is not held_by_the_server
        depthattn.DepthAttentionConfig()
        for package in (held_by_the_server, sys.modules["transformers"]):
            print(package.DepthAttentionForCausalLM.__module__)
        """)
    assert out.split() == ["depthattn.modeling", "depthattn.modeling"]
