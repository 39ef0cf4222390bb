"""The contract of a cross-layer method (docs/methods.md), checked for every conformance case (tests/helpers.py's
`method_cases`: every registered method at its defaults, each variant it declares in `checked_variants`, and a
method registered from outside the package, tests/methods/toy_method.py): registering a method adds it to every
check here and to those of each capability (looped: tests/methods/test_looped.py; continuous batching, activation
checkpointing, tensor parallelism: tests/model/; vLLM: tests/vllm/), and to one tiny study whose every method (each
registered one at its defaults) trains a cell and has its row in the report."""

import argparse
import copy
import re
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

from depthattn import DepthAttentionForCausalLM, count_parameters
from depthattn.commands import convert as convert_command
from depthattn.evaluate import costs
from depthattn.methods import METHODS, AttentionMixer, FlopTerm, Residual
from depthattn.serving.vllm import check_servable
from depthattn.study import Study, markdown_report, run_study
from depthattn.study.local import LocalExecutor
from depthattn.study.store import CellStore

from ..helpers import (
    ELEMENTWISE,
    MATMUL,
    TOY,
    extra_flops_per_token,
    perturb_method,
    prefill_then_decode,
    registered_toy,
    tiny_config,
    tiny_model,
)
from ..study.test_study import BASE, write_study

ATOL = 1e-5
# what the model may call on a method of each family (methods/base.py); a method of neither runs the plain decoder
FAMILY_HOOKS = {
    AttentionMixer: {"acts_at", "keeps_state", "forward", "attend", "mlp_input"},
    Residual: {"init", "read", "read_key_value", "write", "final", "hidden"},
}
# FlopCounterMode sees more than the convention counts (norms, the softmax's and scaling's multiplies, group means)
# and less (CPU SDPA, exp, sigmoid; a weighted sum of 2 vectors is 4 d by convention, 3 d in the model): the count of
# every method so far lies within 0.75x and 1.55x of the analytic one
FLOP_RATIO = 1.6


@pytest.fixture
def settings(method_settings):
    return method_settings


def method_model(settings):
    return perturb_method(tiny_model(**settings))  # away from the initialisation, as training would


def test_trains_with_a_gradient_for_every_parameter(settings):
    model = method_model(settings).train()
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        if not losses:
            assert [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0] == []
        losses.append(loss.item())
        optimizer.step()
    assert losses[-1] < losses[0]


def test_a_float64_model_runs_in_float64_and_agrees_with_float32(settings):
    """Reference comparisons (parity with another implementation, finite differences) want float64: every method
    computes in the model's dtype where it is wider than float32, not in float32 alone."""
    model = method_model(settings)
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(0))
    wide = copy.deepcopy(model).double()(ids).logits
    assert wide.dtype == torch.float64
    torch.testing.assert_close(wide.float(), model(ids).logits, rtol=1e-4, atol=1e-4)


def test_cached_decoding_equals_the_full_forward(settings):
    model = method_model(settings)
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    full = model(ids, use_cache=False).logits
    cached, cache = prefill_then_decode(model, ids, 4)
    torch.testing.assert_close(cached, full, rtol=0, atol=ATOL)
    chunked = DynamicCache(config=model.config)
    chunks = [model(ids[:, a:b], cache=chunked, use_cache=True).logits for a, b in [(0, 3), (3, 8), (8, 9)]]
    torch.testing.assert_close(torch.cat(chunks, 1), full, rtol=0, atol=ATOL)
    generated = model.generate(ids[:1, :5], max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(generated[0, 5:], model(generated[:, :-1]).logits[0, 4:].argmax(-1))
    # attention weights: one entry per layer (an implementation without weights dropped its layers' entries)
    assert len(model(ids, output_attentions=True).attentions) == model.config.unrolled_depth
    # a static cache (generate's cache_implementation="static", `depthattn generate --compile`) has more key slots
    # than tokens: its prefill is where a mask aligned to the last keys reads empty slots
    static = StaticCache(config=model.config, max_cache_len=16)
    spans = [(0, 4), *((t, t + 1) for t in range(4, 9))]
    steps = [model(ids[:, a:b], cache=static, use_cache=True).logits for a, b in spans]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=ATOL)

    # a method keeps nothing across tokens beyond the KV cache, which has exactly vanilla's tensors
    vanilla = tiny_model(**{**settings, "cross_layer": "vanilla"})(ids, use_cache=True).cache
    assert type(cache) is type(vanilla) and len(cache.layers) == len(vanilla.layers)
    for layer, plain in zip(cache.layers, vanilla.layers, strict=True):
        assert type(layer) is type(plain) and vars(layer).keys() == vars(plain).keys()
        for a, b in ((layer.keys, plain.keys), (layer.values, plain.values)):
            assert (a.shape, a.dtype) == (b.shape, b.dtype)


def test_the_model_calls_the_hooks_of_the_methods_family_only(settings):
    model = tiny_model(**settings)
    method = model.model.cross_layer
    families = [family for family in FAMILY_HOOKS if isinstance(method, family)]
    assert len(families) <= 1
    called = set()
    for name in set.union(*FAMILY_HOOKS.values()):
        if hook := getattr(method, name, None):  # recorded on the instance, where the model looks it up
            setattr(method, name, lambda *args, _hook=hook, _name=name, **kwargs: (called.add(_name),
                                                                                   _hook(*args, **kwargs))[1])
    ids = torch.randint(0, 97, (2, 6))
    model(ids, output_hidden_states=True)
    prefill_then_decode(model, ids, 4)
    if not families:
        assert called == set()
    elif families == [Residual]:
        assert called == FAMILY_HOOKS[Residual]
    else:
        assert {"acts_at", "keeps_state", "attend", "mlp_input"} <= called <= FAMILY_HOOKS[AttentionMixer]


def test_save_and_load_give_the_same_model(settings, tmp_path):
    model = method_model(settings)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    state, reloaded_state = model.state_dict(), reloaded.state_dict()
    assert list(state) == list(reloaded_state) and all(torch.equal(state[k], reloaded_state[k]) for k in state)
    ids = torch.randint(0, 97, (2, 7))
    torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    # the method's parameters live under model.cross_layer; the backbone keeps Qwen3's keys
    vanilla = tiny_model(**{**settings, "cross_layer": "vanilla"}).state_dict()
    assert {k for k in state if not k.startswith("model.cross_layer.")} == set(vanilla)


def test_initialisation_reaches_every_parameter_and_leaves_the_backbone_vanillas(settings, tmp_path):
    """With the same seed: a fresh model's backbone is the vanilla model's, and its method parameters are those
    `reset_parameters` gives a model converted from a vanilla checkpoint (its method's keys missing)."""
    config = tiny_config(**settings)
    torch.manual_seed(0)
    vanilla = DepthAttentionForCausalLM(tiny_config(**{**settings, "cross_layer": "vanilla"}))
    torch.manual_seed(0)
    fresh = DepthAttentionForCausalLM(config).state_dict()
    vanilla.save_pretrained(tmp_path)
    torch.manual_seed(0)
    converted = DepthAttentionForCausalLM.from_pretrained(tmp_path, config=config).state_dict()
    assert all(torch.equal(fresh[k], tensor) for k, tensor in vanilla.state_dict().items())
    assert list(converted) == list(fresh)
    assert [k for k in fresh if not torch.equal(converted[k], fresh[k])] == []
    assert all(torch.isfinite(tensor).all() for tensor in fresh.values())


def test_costs_are_declared_and_count_the_built_model(settings):
    model = tiny_model(**settings)
    record = costs.method_costs(model.config, context=100)
    counts = count_parameters(model)
    assert record["params_extra"] == counts["extra_over_vanilla"] and record["params_total"] == counts["total"]
    config = model.config  # the field's count leaves out the embedding and the (untied) head, and nothing else
    tables = config.vocab_size * config.hidden_size * (1 if config.tie_word_embeddings else 2)
    assert counts["non_embedding"] == counts["total"] - tables
    method = METHODS[model.config.cross_layer]
    terms = method.flop_terms(model.config)
    assert all(isinstance(t, FlopTerm) and t.op in ("matmul", "elementwise") and t.role in ("weights", "mix")
               and t.flops >= 0 for t in terms)
    io = method.io_elements(model.config)
    assert set(io) == {"read", "write"} and min(io.values()) >= 0
    assert method.extra_state_elements(model.config, 100) >= 0


def test_analytic_flops_match_the_flop_counter_within_a_tolerance(settings):
    """Per token, the method's model minus the vanilla one, for the terms its FlopTerms say the model runs."""
    analytic = costs.method_costs(tiny_config(**settings))["model_flops_per_token"]
    counted = {"matmul": extra_flops_per_token(settings, MATMUL, ops=None)}
    counted["total"] = extra_flops_per_token(settings, {**MATMUL, **ELEMENTWISE})
    for kind in ("matmul", "total"):
        if analytic[kind] == 0:
            assert counted[kind] == 0, kind
        else:
            assert 1 / FLOP_RATIO <= counted[kind] / analytic[kind] <= FLOP_RATIO, (kind, counted, analytic)


def test_vllm_serves_it_or_says_why_not(settings):
    config = tiny_config(**settings)
    refusal = METHODS[config.cross_layer].vllm_refusal
    if refusal:
        with pytest.raises(ValueError, match=re.escape(refusal)):
            check_servable(config, ranks=1)
    else:
        check_servable(config, ranks=1)


def test_tensor_parallel_ranks_are_taken_or_refused_with_the_fix(settings):
    """One rank is the whole model; more are taken or refused naming tensor_parallel_size (tests/model's
    tensor-parallel world runs every case whose method takes 2 ranks, sharded, against the whole model)."""
    config = tiny_config(**settings)
    method = METHODS[config.cross_layer]
    method.check_tensor_parallel(config, 1)
    for ranks in (2, config.num_key_value_heads + 1):
        try:
            method.check_tensor_parallel(config, ranks)
        except ValueError as error:
            assert "tensor_parallel_size" in str(error), error


def test_switchable_fields_switch_a_built_model_and_compute_the_same(settings):
    """Each switchable field takes each of its portable values in place (as `--method-field` does) with the same
    outputs; the method's other fields are refused. A method's declared variants set its own fields only."""
    method = METHODS[settings["cross_layer"]]
    assert set(method.switchable_fields) <= set(method.config_fields)
    assert set(method.switch_values) == set(method.switchable_fields)
    assert all(set(fields) <= set(method.config_fields) for fields in method.checked_variants.values())
    model = method_model(settings)
    ids = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(0))
    expected = model(ids).logits
    for name, values in method.switch_values.items():
        for value in values:
            model.switch_method_field(name, value)
            assert getattr(model.config, name) == value
            torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=ATOL, msg=f"{name}={value!r}")
    for name in [*(set(method.config_fields) - set(method.switchable_fields)), "num_hidden_layers"]:
        with pytest.raises(ValueError, match=f"{name} is not a switchable field of cross_layer="):
            model.switch_method_field(name, getattr(model.config, name))


def test_convert_offers_the_method_and_its_fields(settings):
    parser = argparse.ArgumentParser()
    convert_command.add_arguments(parser)
    options = {action.dest: action for action in parser._actions}
    name = settings["cross_layer"]
    assert name in options["cross_layer"].choices
    assert set(METHODS[name].config_fields) <= set(options)
    args = parser.parse_args(["src", "out", "--cross-layer", name])
    assert args.cross_layer == name and all(getattr(args, f) is None for f in METHODS[name].config_fields)


def test_every_method_trains_a_study_cell_that_its_report_names(tiny_data, tmp_path):
    """One study of every registered method, the outside one too: every cell finishes and the report has a row per
    method. One torch thread: on a shared machine more spin against each other (40 s become minutes)."""
    threads = torch.get_num_threads()
    try:
        with registered_toy():
            methods = list(METHODS)
            # tests/study's tiny study, 2 steps of 4 x 128 tokens: the whole validation split, which each cell
            # scores, then takes fewer model calls
            base = BASE.format(data=tiny_data).replace("seq_len = 32", "seq_len = 128").replace("steps = 3",
                                                                                              "steps = 2")
            study = Study.load(write_study(tmp_path, tiny_data, axes=base, base=False, methods=methods, seeds=(0,)))
            run_study(study, CellStore.of(study), LocalExecutor(threads=1))
            report = markdown_report(study, CellStore.of(study))
    finally:
        torch.set_num_threads(threads)
    assert TOY in methods and sorted(r.method for r in CellStore.of(study).read_results(study)) == sorted(methods)
    assert [m for m in methods if f"| {m} | 1 |" not in report] == []


def test_every_method_states_its_inference_state_and_documents_itself():
    """Every registered method says what it holds at inference (docs/method.md#baselines), and its description's and
    module's docstrings name its paper, its parameters and its initialisation."""
    from depthattn.methods import DESCRIPTIONS, INFERENCE_STATE

    assert set(INFERENCE_STATE) == set(METHODS) == set(DESCRIPTIONS)
    for name, cls in METHODS.items():
        assert "Across tokens: none" in INFERENCE_STATE[name]
        doc = sys.modules[DESCRIPTIONS[name].__module__].__doc__ + sys.modules[cls.__module__].__doc__
        assert "arXiv" in doc and "Parameters" in doc and "nitialisation" in doc
