"""Our stand-ins for the three modules that transformers' common tests import but its sdist leaves out
(`sdist.MISSING_MODULES` installs them under the names the common tests import).

- `ExportTesterMixin` (tests/exporters/test_export.py) is empty: transformers' export tests are not run.
- `GenerationTesterMixin` (tests/generation/test_utils.py) is empty: transformers' `generate` tests are not run.
  depthattn's own tests cover `generate` (greedy, sampling, left-padded batches), cached and chunked decoding and
  the static cache (tests/model/test_cache.py, tests/methods/test_looped.py), not beam search. The test classes do
  not inherit it and check instead which classes can generate (test_transformers_common.py).
- `config_common_kwargs` (tests/utils/test_configuration_utils.py): `ConfigTester.check_config_arguments_init`
  builds a config from it and checks that each value is kept. It holds every attribute that `PreTrainedConfig`
  itself sets from its arguments, each with a value other than its default;
  test_transformers_common.py checks that against the installed `PreTrainedConfig`.
"""

class ExportTesterMixin:
    pass


class GenerationTesterMixin:
    pass


config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 4,
    "architectures": ["DepthAttentionForCausalLM"],
    "id2label": {0: "negative", 1: "neutral", 2: "positive"},
    "label2id": {"negative": 0, "neutral": 1, "positive": 2},
    "problem_type": "single_label_classification",
}
