"""The Triton kernels against the reference. Collected by test_triton.py; on a machine without a GPU they
need Triton's interpreter, which must be switched on before `triton.language` is imported, so test_triton.py
runs this file in a fresh process with TRITON_INTERPRET=1 when the current process cannot interpret."""

import pytest
import torch

from depthattn import ops
from depthattn.layer_states import DepthState
from tests.ops.depth_cases import assert_same, make_inputs
from tests.ops.test_depth_mix import CASES, REF, TOL, case_id


def triton_device() -> tuple[torch.device | None, str]:
    """(device the kernels run on here, or None with the reason)."""
    if not ops.TRITON_AVAILABLE:
        return None, "triton is not installed (pip install triton)"
    if torch.cuda.is_available():
        return torch.device("cuda"), ""
    if ops.triton_runs_on(torch.device("cpu")):
        return torch.device("cpu"), ""
    return None, ("no GPU, and this process cannot run Triton's interpreter (TRITON_INTERPRET=1 was not set "
                  "before triton.language was imported); test_triton.py runs these cases in a fresh process")


@pytest.fixture(scope="module")
def device():
    dev, reason = triton_device()
    if dev is None:
        pytest.skip(reason)
    return dev


def on(device, q, state, sources):
    moved = {}

    def m(t):
        if id(t) not in moved:
            moved[id(t)] = t.detach().to(device).requires_grad_()
        return moved[id(t)]
    return m(q), DepthState(*map(m, state)), [DepthState(*map(m, s)) for s in sources]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_triton_matches_reference(device, case, dtype):
    n, hq, hkv, rule, states = case
    seq_len = 37 if dtype == torch.float32 else 5  # several blocks of positions, the last one ragged
    inputs = on(device, *make_inputs(seq_len=seq_len, num_sources=n, num_heads=hq, num_kv_heads=hkv, dtype=dtype))
    assert_same(ops.depth_mix_triton, REF, *inputs, 0.25, rule, states, **TOL[dtype])


def test_triton_distinct_score_keys_odd_head_dim(device):
    inputs = on(device, *make_inputs(seq_len=5, num_sources=2, head_dim=24, shared_key=False))
    assert_same(ops.depth_mix_triton, REF, *inputs, 24 ** -0.5, "softmax", "kv", **TOL[torch.float32])


def test_triton_bfloat16_close_to_reference(device):
    inputs = on(device, *make_inputs(seq_len=9, num_sources=2, dtype=torch.bfloat16))
    assert_same(ops.depth_mix_triton, REF, *inputs, 0.25, "softmax", "kv", atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("mix_states", ["v", "kv"])
def test_triton_autocast_dtypes_close_to_reference(device, mix_states):
    """As under bfloat16 autocast: float32 queries and keys (after their norms), bfloat16 values. Each table is
    read in its own type (reading bfloat16 values as float32 read past their buffers), every output and
    gradient comes back in its input's type."""
    q, state, sources = make_inputs(seq_len=9, num_sources=2)

    def bf16_values(s):
        return DepthState(s.score_key, s.key, s.value.detach().to(torch.bfloat16).requires_grad_())

    q, state, sources = on(device, q, bf16_values(state), [bf16_values(s) for s in sources])
    mixed, _ = ops.depth_mix_triton(q, state, sources, 0.25, "softmax", mix_states)
    assert mixed.value.dtype == torch.bfloat16 and mixed.key.dtype == torch.float32
    assert_same(ops.depth_mix_triton, REF, q, state, sources, 0.25, "softmax", mix_states, atol=3e-2, rtol=3e-2)


def test_auto_takes_triton_on_gpu_for_many_rows(device):
    if device.type != "cuda":
        pytest.skip("auto picks Triton on GPUs only")
    q, state, sources = on(device, *make_inputs(seq_len=80, num_sources=2))  # 2 x 2 x 80 rows: many
    a, _ = ops.depth_mix(q, state, sources, 0.25, impl="auto")
    b, _ = ops.depth_mix_triton(q, state, sources, 0.25)
    torch.testing.assert_close(a.value, b.value, rtol=0, atol=0)
    q, state, sources = on(device, *make_inputs(seq_len=1, num_sources=2))  # a decoding step: the compiled form
    a, _ = ops.depth_mix(q, state, sources, 0.25, impl="auto", need_weights=False)
    b, _ = ops.depth_mix_compiled(q, state, sources, 0.25, need_weights=False)
    torch.testing.assert_close(a.value, b.value, rtol=0, atol=0)
