"""The C++ CPU kernel (`depth_impl="cpu"`) against the reference: outputs and weights without gradients, and
gradients through its fallback; the model decodes the same tokens with it."""

import shutil

import pytest
import torch
from torch.utils import cpp_extension

from depthattn import ops
from depthattn.ops.depth_mix import cpu
from tests.helpers import tiny_model
from tests.ops.depth_cases import assert_same, make_inputs
from tests.ops.test_depth_mix import CASES, REF, TOL, case_id

pytestmark = pytest.mark.skipif(
    not (cpp_extension.is_ninja_available() and (shutil.which("c++") or shutil.which("g++"))),
    reason="depth_impl='cpu' needs a C++ compiler and ninja")


@pytest.fixture(scope="module", autouse=True)
def kernel():
    return cpu.load_cpu_kernel()  # a failed build fails every test here, with the compiler's message


class _KernelCalls:
    """Counts calls of the C++ kernel while active."""

    def __init__(self, monkeypatch):
        self.calls, kernel = 0, cpu.load_cpu_kernel()

        def counted(*args):
            self.calls += 1
            return kernel(*args)

        monkeypatch.setattr(cpu, "load_cpu_kernel", lambda: counted)


def _outputs(fn, q, state, sources, *args):
    with torch.no_grad():
        mixed, weights = fn(q, state, sources, *args)
    return mixed.key, mixed.value, weights


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("seq_len", [1, 7, 200], ids=["decode", "few-rows", "many-rows"])
def test_kernel_matches_reference(case, dtype, seq_len, monkeypatch):
    n, hq, hkv, rule, states = case
    q, state, sources = make_inputs(seq_len=seq_len, num_sources=n, num_heads=hq, num_kv_heads=hkv, dtype=dtype)
    calls = _KernelCalls(monkeypatch)
    got = _outputs(ops.depth_mix_cpu, q, state, sources, 0.25, rule, states)
    assert calls.calls == 1
    want = _outputs(REF, q, state, sources, 0.25, rule, states)
    for name, a, b in zip(("key", "value", "weights"), got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("rule", ["softmax", "uniform", "linear"])  # linear: the compiled form
def test_kernel_score_bias_and_distinct_score_keys(rule):
    q, state, sources = make_inputs(seq_len=3, num_sources=3, dtype=torch.float64, shared_key=False)
    bias = torch.tensor([0.5, -1.0, 0.25, 2.0])  # float32 bias, float64 model: converted as the reference does
    got = _outputs(ops.depth_mix_cpu, q, state, sources, 0.3, rule, "kv", bias)
    for a, b in zip(got, _outputs(REF, q, state, sources, 0.3, rule, "kv", bias), strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_kernel_bfloat16_close_to_reference():
    q, state, sources = make_inputs(seq_len=1, num_sources=2, dtype=torch.bfloat16)
    for a, b in zip(_outputs(ops.depth_mix_cpu, q, state, sources, 0.25, "softmax", "kv"),
                    _outputs(REF, q, state, sources, 0.25, "softmax", "kv"), strict=True):
        torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2)


def test_gradients_take_the_compiled_form(monkeypatch):
    q, state, sources = make_inputs(seq_len=7, num_sources=3)
    bias = torch.tensor([0.5, -1.0, 0.25, 2.0], requires_grad=True)
    calls = _KernelCalls(monkeypatch)
    assert_same(ops.depth_mix_cpu, REF, q, state, sources, 0.25, "softmax", "kv", score_bias=bias,
                **TOL[torch.float32])
    assert calls.calls == 0


def test_mixed_dtypes_are_refused():
    q, state, sources = make_inputs(seq_len=1, num_sources=2)
    sources[0] = sources[0]._replace(value=sources[0].value.double())
    with torch.no_grad(), pytest.raises(RuntimeError, match="every state must be a CPU tensor of the query's dtype"):
        ops.depth_mix_cpu(q, state, sources, 0.25)


def test_model_decodes_the_same_tokens_and_trains(monkeypatch):
    prompt = torch.tensor([[5, 17, 3, 42, 8, 1]])
    out = {}
    for impl in ("reference", "cpu"):
        model = tiny_model(cross_layer="depth_attention", depth_stride=1, depth_mix_states="kv", depth_impl=impl)
        calls = _KernelCalls(monkeypatch)
        with torch.no_grad():
            logits = model(prompt).logits
        tokens = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert (calls.calls > 0) == (impl == "cpu")
        model(prompt, labels=prompt).loss.backward()  # training: the compiled form
        out[impl] = logits, tokens, [p.grad for p in model.parameters()]
    torch.testing.assert_close(out["cpu"][0], out["reference"][0], atol=1e-5, rtol=1e-5)
    assert out["cpu"][1].tolist() == out["reference"][1].tolist()
    torch.testing.assert_close(out["cpu"][2], out["reference"][2], atol=1e-5, rtol=1e-4)


def no_compiler(**kwargs):
    raise OSError("c++: command not found")


def test_a_failed_build_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # nothing built there
    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with pytest.raises(RuntimeError, match="needs a C\\+\\+ compiler .* and ninja .* or use depth_impl='auto'"):
        cpu.load_cpu_kernel.__wrapped__()


def test_a_build_is_loaded_again_without_compiling_until_its_source_changes(monkeypatch, tmp_path):
    """What another checkout or venv with the same source, torch and Python finds: the build, by its hash."""
    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    monkeypatch.setattr(cpu, "load_cpu_kernel", cpu.load_cpu_kernel.__wrapped__)  # loaded anew at each call
    q, state, sources = make_inputs(seq_len=1)
    for a, b in zip(_outputs(ops.depth_mix_cpu, q, state, sources, 0.25), _outputs(REF, q, state, sources, 0.25),
                    strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float32])
    changed = tmp_path / "cpu_kernel.cpp"
    changed.write_text(cpu._SOURCE.read_text() + "// changed\n")
    monkeypatch.setattr(cpu, "_SOURCE", changed)
    with pytest.raises(RuntimeError, match="needs a C\\+\\+ compiler"):
        cpu.load_cpu_kernel()


def test_a_finished_build_is_found_however_torch_locks_its_folder(monkeypatch, tmp_path):
    """torch up to 2.14 marks a build in progress by its lock file's existence; torch 2.15 by an OS advisory lock on
    a file that stays after the build: there a finished build beside that file is loaded, one whose lock is held is
    not (until 2.15 every later process rebuilt, and without a compiler failed)."""
    from filelock import FileLock

    folder = tmp_path / "build"
    folder.mkdir()
    assert not cpu._being_built(folder)
    (folder / "lock").touch()
    monkeypatch.setattr(cpp_extension, "FileLock", FileLock, raising=False)  # torch 2.15's way
    assert not cpu._being_built(folder)
    with FileLock(str(folder / "lock")):
        assert cpu._being_built(folder)
    monkeypatch.delattr(cpp_extension, "FileLock", raising=False)  # torch 2.14's way
    assert cpu._being_built(folder)
