"""transformers' own common model and configuration tests (`ModelTesterMixin`, `ConfigTester`, from the installed
version's sdist: sdist.py) run against depthattn's classes, as transformers' tests/models/qwen3 runs them for Qwen3:
a vanilla decoder (cross_layer="vanilla") and Depth-Attention with its default stride. Tests that do not apply are
skipped with the reason; tests needing a GPU, flash attention or RUN_SLOW skip by transformers' own decorators."""

import dataclasses
import unittest
from unittest import mock

import torch
import transformers
from transformers.models.auto import modeling_auto

from depthattn import DepthAttentionConfig, DepthAttentionForCausalLM, DepthAttentionModel
from tests.native import sdist, standins

common = sdist.import_common_tests()  # skips this module, saying why, where they are missing
ids_tensor = common.test_modeling_common.ids_tensor


class DepthAttentionModelTester:
    """What `ModelTesterMixin` reads from its model tester: the sizes, `get_config`, and a config with inputs."""

    batch_size = 4
    seq_length = 7
    is_training = True
    vocab_size = 99
    hidden_size = 32
    num_hidden_layers = 2  # the most test_num_layers_is_small allows; Depth-Attention's default stride is then 1
    num_attention_heads = 4
    num_key_value_heads = 2  # GQA
    intermediate_size = 37
    max_position_embeddings = 512
    pad_token_id = 0

    def __init__(self, cross_layer: str):
        self.config_kwargs = dict(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            intermediate_size=self.intermediate_size, max_position_embeddings=self.max_position_embeddings,
            pad_token_id=self.pad_token_id, cross_layer=cross_layer,
        )

    def get_config(self) -> DepthAttentionConfig:
        return DepthAttentionConfig(**self.config_kwargs)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        # right padding of random lengths; the first token is never padding
        lengths = ids_tensor([self.batch_size], self.seq_length) + 1
        attention_mask = (torch.arange(self.seq_length) < lengths[:, None]).long()
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class CommonTests(common.test_modeling_common.ModelTesterMixin):
    """The common tests for one setting of `cross_layer`; a `unittest.TestCase` subclass picks it."""

    cross_layer: str
    all_model_classes = (DepthAttentionModel, DepthAttentionForCausalLM)
    test_can_init_all_missing_weights_before_2023 = True  # else skipped: our config.py has no copyright year

    def setUp(self):
        # The common tests tell a base model from a head by transformers' tables of its own models' class names;
        # ours are registered at run time (depthattn/__init__.py), so each test puts them there too.
        model_type = DepthAttentionConfig.model_type
        for table, model_class in ((modeling_auto.MODEL_MAPPING_NAMES, DepthAttentionModel),
                                   (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, DepthAttentionForCausalLM)):
            self.enterContext(mock.patch.dict(table, {model_type: model_class.__name__}))
        self.model_tester = DepthAttentionModelTester(self.cross_layer)
        self.config_tester = common.test_configuration_common.ConfigTester(
            self, config_class=DepthAttentionConfig, **self.model_tester.config_kwargs)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_config_common_kwargs_cover_pretrained_config(self):
        """Our stand-in `config_common_kwargs` sets every attribute that the installed `PreTrainedConfig` sets from
        its arguments, each to a value other than its default (else check_config_arguments_init proves less)."""
        base = transformers.PreTrainedConfig()
        bookkeeping = {"transformers_version", "is_encoder_decoder"}  # not taken from common arguments
        fields = {f.name for f in dataclasses.fields(base) if f.name not in bookkeeping} | {"output_attentions"}
        self.assertEqual(set(standins.config_common_kwargs), fields)
        defaults = [k for k, v in standins.config_common_kwargs.items() if getattr(base, k) == v]
        self.assertEqual(defaults, [])

    def test_generation_tester_mixin_inheritance(self):
        """transformers' generate tests are not run (standins.py); what this test guards upstream, that every
        class that can generate is known as such, is checked directly."""
        self.assertEqual(self.all_generative_model_classes, (DepthAttentionForCausalLM,))


class VanillaCommonTest(CommonTests, unittest.TestCase):
    cross_layer = "vanilla"


class DepthAttentionCommonTest(CommonTests, unittest.TestCase):
    cross_layer = "depth_attention"

    @unittest.skip(reason="Depth-Attention refuses use_reentrant=True on purpose: reentrant checkpointing would lose "
                   "the gradients that reach earlier layers through depth mixing (the refusal is tested in "
                   "tests/model/test_gradient_checkpointing.py)")
    def test_training_gradient_checkpointing_use_reentrant_true(self):
        pass
