"""Refactors change no numbers: the logits and one training step's gradients of every preset, on weights fixed
by parameter name, against values recorded from an earlier version (frozen_behaviour.json).

On the machine kind that recorded them (same torch and CPU capability) the check is bitwise, through a sha256
of every tensor's bytes; elsewhere kernels may sum in another order, so sums are compared with a tolerance.
Regenerate (only when a change of numbers is intended): `python -m tests.model.test_frozen_behaviour`.
"""

import hashlib
import json
import zlib
from pathlib import Path

import pytest
import torch

from depthattn import METHOD_PRESETS, method_settings
from tests.helpers import tiny_config

RECORD = Path(__file__).with_name("frozen_behaviour.json")
THREADS = 2  # the record is bitwise only at one thread count: the test measures at it, whatever pytest set
CASES = {name: dict(num_hidden_layers=4) for name in METHOD_PRESETS} | {
    "depth_attention-looped": dict(num_hidden_layers=2, num_loops=2),
    "mhc-looped": dict(num_hidden_layers=2, num_loops=2),
}


def platform() -> str:
    return f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {THREADS} threads"


def fixed_model(case: str):
    from depthattn import DepthAttentionForCausalLM

    shape = CASES[case]
    method = case.removesuffix("-looped")
    config = tiny_config(**{**method_settings(method, shape["num_hidden_layers"], shape.get("num_loops", 1)),
                            **shape, "attnres_block_size": 3, "mhc_streams": 3, "hc_streams": 3, "depth_impl": "auto"})
    model = DepthAttentionForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():  # values fixed by name, whatever the init code does
            generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            param.copy_(0.5 + 0.2 * torch.randn(param.shape, generator=generator) if name.endswith("norm.weight")
                        else 0.1 * torch.randn(param.shape, generator=generator))
    return model


def measure(case: str) -> dict[str, torch.Tensor]:
    model = fixed_model(case).train()
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        out = model(ids, labels=ids)
        out.loss.backward()
    finally:
        torch.set_num_threads(threads)
    return {"logits": out.logits.detach(), **{f"grad:{n}": p.grad for n, p in model.named_parameters()}}


def summary(tensors: dict[str, torch.Tensor]) -> dict:
    return {name: {"sha256": hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest(),
                   "sum": t.double().sum().item(), "abs_sum": t.double().abs().sum().item()}
            for name, t in tensors.items()}


@pytest.mark.parametrize("case", CASES)
def test_numbers_unchanged(case):
    record = json.loads(RECORD.read_text())
    expected = record["cases"][case]
    got = summary(measure(case))
    assert sorted(got) == sorted(expected), "the parameter names changed"
    for name, values in expected.items():
        if record["platform"] == platform():
            assert got[name]["sha256"] == values["sha256"], f"{case} {name}: not bitwise equal to the record"
        else:
            for key in ("sum", "abs_sum"):
                assert got[name][key] == pytest.approx(values[key], rel=1e-4, abs=1e-6), f"{case} {name} {key}"


if __name__ == "__main__":
    cases = {case: summary(measure(case)) for case in CASES}
    RECORD.write_text(json.dumps({"platform": platform(), "cases": cases}, indent=1) + "\n")
    print(f"recorded {len(cases)} cases on {platform()} in {RECORD}")
