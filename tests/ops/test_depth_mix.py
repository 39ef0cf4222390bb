"""Every fast depth-mixing path against the reference `depthattn.ops.depth_mix_reference`: outputs and gradients."""

import importlib
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from depthattn import ops
from depthattn.layer_states import DepthState
from depthattn.ops.depth_mix import compiled
from tests.ops.depth_cases import assert_same, make_inputs

REF = ops.depth_mix_reference
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float64: dict(atol=1e-12, rtol=1e-10)}

# (num_sources, Hq, Hkv, rule, mix_states): source counts 0..4, GQA ratios 1, 2, 4, both rules, all mixed states
CASES = [
    (1, 4, 2, "softmax", "v"),
    (2, 4, 2, "softmax", "v"),
    (4, 8, 2, "softmax", "v"),
    (2, 4, 4, "softmax", "kv"),
    (3, 4, 1, "softmax", "k"),
    (0, 4, 2, "softmax", "v"),
    (2, 4, 2, "uniform", "v"),
    (3, 8, 2, "uniform", "kv"),
]


def case_id(case):
    n, hq, hkv, rule, states = case
    return f"n{n}-gqa{hq}x{hkv}-{rule}-{states}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("seq_len", [1, 7, 200], ids=["decode", "few-rows", "many-rows"])  # both forms
def test_compiled_matches_reference(case, dtype, seq_len):
    n, hq, hkv, rule, states = case
    q, state, sources = make_inputs(seq_len=seq_len, num_sources=n, num_heads=hq, num_kv_heads=hkv, dtype=dtype)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, rule, states, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("seq_len", [1, 7], ids=["decode", "few-rows"])
def test_compiled_without_weights_matches_reference(case, dtype, seq_len):
    n, hq, hkv, rule, states = case  # the softmax rule takes the scaled_dot_product_attention form
    q, state, sources = make_inputs(seq_len=seq_len, num_sources=n, num_heads=hq, num_kv_heads=hkv, dtype=dtype)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, rule, states, need_weights=False, **TOL[dtype])
    assert (ops.depth_mix_compiled(q, state, sources, 0.25, rule, states, need_weights=False)[1] is None) == (
        rule == "softmax")


def test_compiled_without_weights_score_bias_and_bfloat16():
    q, state, sources = make_inputs(seq_len=1, num_sources=3, dtype=torch.float64, shared_key=False)
    bias = torch.tensor([0.5, -1.0, 0.25, 2.0], dtype=torch.float64, requires_grad=True)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, "softmax", "kv", score_bias=bias,
                need_weights=False, **TOL[torch.float64])
    q, state, sources = make_inputs(seq_len=1, num_sources=2, dtype=torch.bfloat16)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, "softmax", "kv", need_weights=False,
                atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("rule", ["softmax", "uniform", "linear"])
@pytest.mark.parametrize("seq_len", [1, 200], ids=["decode-rows", "many-rows"])
def test_compiled_score_bias_matches_reference(rule, seq_len):
    q, state, sources = make_inputs(seq_len=seq_len, num_sources=3, dtype=torch.float64)
    bias = torch.tensor([0.5, -1.0, 0.25, 2.0], dtype=torch.float64, requires_grad=True)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, rule, "kv", score_bias=bias,
                **TOL[torch.float64])


def test_zero_score_bias_is_plain_depth_attention():
    q, state, sources = make_inputs(seq_len=7, num_sources=2)
    for rule in ("softmax", "uniform"):
        plain = REF(q, state, sources, 0.25, rule, "v")
        biased = REF(q, state, sources, 0.25, rule, "v", torch.zeros(3))
        torch.testing.assert_close(biased[1], plain[1], atol=1e-7, rtol=0)
        torch.testing.assert_close(biased[0].value, plain[0].value, atol=1e-7, rtol=0)
    uniform = REF(q, state, sources, 0.25, "uniform", "v", torch.tensor([0.0, 1.0, 2.0]))[1]
    torch.testing.assert_close(uniform[0, 0, 0], torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0))


def test_linear_rule_takes_the_weights_as_they_are():
    q, state, sources = make_inputs(seq_len=7, num_sources=2)
    weights = torch.tensor([0.5, -1.0, 2.0])  # not normalised
    mixed, got = REF(q, state, sources, 0.25, "linear", "v", weights)
    assert torch.equal(got[1, 0, 3], weights)
    expected = 0.5 * sources[0].value - sources[1].value + 2.0 * state.value
    torch.testing.assert_close(mixed.value, expected, atol=1e-6, rtol=0)
    average = REF(q, state, sources, 0.25, "linear", "v", torch.full((3,), 1 / 3))[0]
    torch.testing.assert_close(average.value, REF(q, state, sources, 0.25, "uniform", "v")[0].value, atol=1e-6,
                               rtol=0)


def test_compiled_distinct_score_keys_and_strided_inputs():
    q, state, sources = make_inputs(seq_len=70, num_sources=2, shared_key=False)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.3, "softmax", "kv", **TOL[torch.float32])


@pytest.mark.parametrize("seq_len", [1, 200], ids=["decode-rows", "many-rows"])
def test_compiled_bfloat16_close_to_reference(seq_len):
    q, state, sources = make_inputs(seq_len=seq_len, num_sources=2, dtype=torch.bfloat16)
    assert_same(ops.depth_mix_compiled, REF, q, state, sources, 0.25, "softmax", "kv", atol=3e-2, rtol=3e-2)


def test_both_compiled_forms_are_used():
    assert 2 * 4 * 7 <= compiled.SMALL_ROWS < 2 * 1 * 200


class _CopiesOfSources(TorchDispatchMode):
    """Records cat/stack calls that take tensors of the sources' shape (copies of the sources)."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.copies = tuple(shape), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.cat, torch.ops.aten.stack) and any(
                tuple(t.shape) == self.shape for t in args[0]):
            self.copies.append(str(func))
        return func(*args, **(kwargs or {}))


def test_training_path_never_copies_the_sources():
    q, state, sources = make_inputs(batch=2, seq_len=200, num_sources=3)
    with _CopiesOfSources(state.value.shape) as mode:
        mixed, weights = ops.depth_mix_compiled(q, state, sources, 0.25, "softmax", "kv")
        (mixed.value.sum() + mixed.key.sum() + weights.sum()).backward()
    assert mode.copies == []


def test_dispatch():
    assert ops.get_depth_mix("reference") is REF
    assert ops.get_depth_mix("compiled") is ops.depth_mix_compiled
    assert set(ops.DEPTH_IMPLS) == {"auto", "reference", "compiled", "triton", "cpu"}
    with pytest.raises(ValueError, match="'auto', 'reference', 'compiled', 'triton'"):
        ops.get_depth_mix("fast")
    q, state, sources = make_inputs()
    a, wa = ops.depth_mix(q, state, sources, 0.25, impl="auto")  # CPU: the compiled form
    b, wb = ops.depth_mix_compiled(q, state, sources, 0.25)
    torch.testing.assert_close(a.value, b.value, rtol=0, atol=0)
    torch.testing.assert_close(wa, wb, rtol=0, atol=0)


def test_auto_takes_triton_for_many_rows_only(monkeypatch):
    """On a GPU with Triton (faked here: meta tensors, Triton said to run on them), "auto" takes the kernels for
    training and prefill, and the compiled form for a decoding step's few rows, where a Triton call's host-side
    cost (its pointer tables, its launch) is more than the compiled form's few ops."""
    depth_mix = importlib.import_module("depthattn.ops.depth_mix")  # the package (ops.depth_mix is its function)
    monkeypatch.setattr(depth_mix, "TRITON_AVAILABLE", True)
    monkeypatch.setattr(depth_mix, "triton_runs_on", lambda device: True)

    def inputs(batch, seq_len, heads=24, kv_heads=6):
        query = torch.empty(batch, heads, seq_len, 64, device="meta")
        state = torch.empty(batch, kv_heads, seq_len, 64, device="meta")
        return query, DepthState(state, state, state)

    assert not depth_mix.takes_triton(*inputs(batch=1, seq_len=1))  # decoding, batch 1
    assert not depth_mix.takes_triton(*inputs(batch=16, seq_len=1))  # decoding, batch 16: 96 rows
    assert depth_mix.takes_triton(*inputs(batch=4, seq_len=2048))  # training, prefill
    assert not depth_mix.takes_triton(*inputs(batch=4, seq_len=2048), score_bias=torch.zeros(3))


def test_decoding_step_stacks_its_states_once():
    q, state, sources = make_inputs(batch=1, seq_len=1, num_sources=2)
    with _CopiesOfSources(state.value.shape) as mode:
        ops.depth_mix_compiled(q, state, sources, 0.25, "softmax", "v", need_weights=False)
    assert len(mode.copies) == 1


def test_package_imports_without_triton():
    code = ("import sys; sys.modules['triton'] = None\n"
            "import depthattn.ops as o\n"
            "assert not o.TRITON_AVAILABLE\n"
            "from tests.ops.depth_cases import make_inputs\n"
            "q, s, src = make_inputs()\n"
            "o.depth_mix(q, s, src, 0.25, impl='auto')\n"
            "try:\n    o.depth_mix_triton(q, s, src, 0.25)\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    assert "needs the `triton` package" in out.stdout


def test_the_reference_linear_rule_without_a_bias_says_what_is_missing():
    q, state, sources = make_inputs()
    with pytest.raises(ValueError, match="linear rule weighs the sources by score_bias alone: pass score_bias"):
        ops.depth_mix_reference(q, state, sources, 0.25, "linear")
