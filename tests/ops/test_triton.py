"""Triton kernels: natively on a GPU; on CPU in Triton's interpreter (in a fresh process if need be)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from depthattn import ops
from tests.ops.triton_cases import *  # noqa: F401,F403  (the cases, run here where this process can)
from tests.ops.triton_cases import triton_device

ROOT = Path(__file__).resolve().parents[2]


def test_triton_cases_in_a_fresh_interpreter_process():
    if not ops.TRITON_AVAILABLE:
        pytest.skip("triton is not installed (pip install triton)")
    if triton_device()[0] is not None:
        pytest.skip("the cases run in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "tests/ops/triton_cases.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    if "only 0-dimensional arrays can be converted to Python scalars" in out.stdout:
        pytest.skip("this Triton's interpreter cannot run with numpy >= 2.4 (it takes int() of a one-element array); "
                    "with numpy < 2.4 installed these cases run here")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout, out.stdout[-2000:]
    print(out.stdout[-1000:])


def _compile_for_gpu(kernel, pointer_types: dict, constexprs: dict, arch: int = 90):
    import triton
    from triton.backends.compiler import GPUTarget

    signature = {name: "constexpr" if name in constexprs else pointer_types.get(name, "i32")
                 for name in kernel.arg_names}
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32))


@pytest.mark.parametrize("query_and_keys,values", [("fp32", "fp32"), ("bf16", "bf16"), ("fp32", "bf16")],
                         ids=["fp32", "bf16", "autocast"])
def test_triton_kernels_compile_for_an_nvidia_gpu(query_and_keys, values):
    """Without a GPU: the kernels go through Triton's whole pipeline to a Hopper (sm_90) binary, with the
    ptxas that the Triton wheel ships; this catches what the interpreter lets through (types, layouts). The
    autocast case: float32 queries and keys (normed), bfloat16 values."""
    if not ops.TRITON_AVAILABLE:
        pytest.skip("triton is not installed (pip install triton)")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1: kernels are interpreted, not compiled, in this process")
    from depthattn.ops.depth_mix import _triton_kernels as kernels
    tl = kernels.tl
    ptr, v_ptr, acc = "*" + query_and_keys, "*" + values, "*fp32"
    types = {"fp32": tl.float32, "bf16": tl.bfloat16}
    common = dict(q_ptr=ptr, sk_table="*i64", k_table="*i64", v_table="*i64", w_ptr=acc, scale_ptr=acc)
    flags = dict(G=4, D=64, BLOCK_D=64, BLOCK_T=32, SOFTMAX=True, MIX_K=True, MIX_V=True,
                 SK_DTYPE=types[query_and_keys], K_DTYPE=types[query_and_keys], V_DTYPE=types[values],
                 ACC=tl.float32)
    try:
        forward = _compile_for_gpu(kernels.forward_kernel, {**common, "out_k_ptr": ptr, "out_v_ptr": v_ptr}, flags)
        backward = _compile_for_gpu(
            kernels.backward_kernel,
            {**common, "dw_ptr": acc, "scratch_ptr": acc, "dout_v_ptr": v_ptr, "dv_ptr": v_ptr,
             **{k: ptr for k in ("dout_k_ptr", "dq_ptr", "dsk_ptr", "dk_ptr")}},
            {**flags, "HAS_DW": True})
    except (RuntimeError, FileNotFoundError) as error:  # pragma: no cover - a Triton build without the CUDA backend
        if "ptxas" in str(error) or "backend" in str(error).lower():
            pytest.skip(f"this Triton build cannot compile for NVIDIA GPUs here: {error}")
        raise
    assert forward.asm.get("cubin") and backward.asm.get("cubin")
