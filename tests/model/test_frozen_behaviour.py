"""Refactors change no numbers: the logits and one training step's gradients of every preset, on weights fixed
by parameter name, against values recorded from an earlier version (frozen_behaviour.json).

The record names the machine that recorded it: CPU vendor, model name, family, model and stepping, torch version,
CPU capability, the build's BLAS/oneDNN libraries and the thread count, which together decide the float32 bits.
On that machine the check is bitwise, through a sha256 of every tensor's bytes. Anywhere else kernels may sum in
another order, so each recorded summary (sum, abs_sum, and where recorded the L2 norm and fixed Gaussian
projections) must lie within a tolerance of the tensor's L2 norm. A key with an unknown field (null) names no
machine: such a record is compared by tolerance everywhere.

The tolerance is measured, not guessed: float32 kernels that sum in another order differ from each other by about
as much as each differs from exact arithmetic. So every case runs in float32 and in float64 (the same weights cast
to double) and at 1 against 2 threads; the largest deviation of a summary, relative to the tensor's L2 norm, times
FACTOR is the tolerance (stored in the record with how it was obtained). RoPE's angle tables are float32 in both
runs, so their rounding is not in the measurement: one reason for the factor.

Regenerate (only when a change of numbers is intended): `python -m tests.model.test_frozen_behaviour`;
`--rekey` keeps every recorded number and, where this machine reproduces every sha256, names it as the recording
machine and adds the summaries the record lacks (refused otherwise); `--tolerance` measures the tolerance again;
`--add-cases` records the cases the record lacks (a new preset), every recorded one kept.
"""

import argparse
import hashlib
import json
import re
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from depthattn import METHOD_PRESETS, method_settings
from tests.helpers import tiny_config

RECORD = Path(__file__).with_name("frozen_behaviour.json")
THREADS = 2  # the record is bitwise only at one thread count: the test measures at it, whatever pytest set
FACTOR = 10  # safety factor on the measured float32 deviation
PROJECTIONS = 4  # fixed Gaussian directions: they see any change of a tensor, where its sum may not
CASES = {name: dict(num_hidden_layers=4) for name in METHOD_PRESETS} | {
    "depth_attention-looped": dict(num_hidden_layers=2, num_loops=2),
    "mhc-looped": dict(num_hidden_layers=2, num_loops=2),
}


def cpu() -> str | None:
    """Vendor, model name, family, model and stepping from /proc/cpuinfo; None where they cannot be read."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return None
    fields = dict(map(str.strip, line.split(":", 1)) for line in first.splitlines() if ":" in line)
    if not {"vendor_id", "model name", "cpu family", "model", "stepping"} <= fields.keys():
        return None
    return (f"{fields['vendor_id']} {fields['model name']} "
            f"(family {fields['cpu family']}, model {fields['model']}, stepping {fields['stepping']})")


def libraries() -> list[str]:
    """The torch build's BLAS, LAPACK and oneDNN, as torch.__config__.show() names them (with versions)."""
    config = torch.__config__.show()
    return ([line.strip(" -") for line in config.splitlines()
             if re.search("Math Kernel Library|MKL-DNN|oneDNN|OpenBLAS", line)]
            + re.findall(r"(?:BLAS|LAPACK)_INFO=\w+", config))


def machine() -> dict:
    return {"cpu": cpu(), "torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
            "libraries": libraries(), "threads": THREADS}


def on_recording_machine(record: dict) -> bool:
    here = machine()
    return here["cpu"] is not None and record["machine"] == here


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


def measure(model, threads: int = THREADS) -> dict[str, torch.Tensor]:
    model.train()
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = model(ids, labels=ids)
        out.loss.backward()
    finally:
        torch.set_num_threads(before)
    return {"logits": out.logits.detach(), **{f"grad:{n}": p.grad for n, p in model.named_parameters()}}


def summary(tensors: dict[str, torch.Tensor]) -> dict:
    result = {}
    for name, t in tensors.items():
        flat = t.double().flatten()
        directions = torch.randn(PROJECTIONS, flat.numel(), generator=torch.Generator().manual_seed(0),
                                 dtype=torch.float64)
        result[name] = {"sha256": hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest(),
                        "sum": flat.sum().item(), "abs_sum": flat.abs().sum().item(), "l2": flat.norm().item(),
                        **{f"projection {i}": p for i, p in enumerate((directions @ flat).tolist())}}
    return result


def deviation(expected: dict, got: dict) -> float:
    """The largest difference of a summary recorded in `expected`, relative to the tensor's L2 norm in `got`."""
    difference = max(abs(got[key] - value) for key, value in expected.items() if key != "sha256")
    return difference / max(got["l2"], sys.float_info.min)  # an all-zero tensor must match exactly


def differences(record: dict, case: str, got: dict[str, dict]) -> list[str]:
    """Where the summaries `got` of a case disagree with the record: bitwise on the machine the record names, by
    its tolerance elsewhere. Empty when they agree."""
    expected = record["cases"][case]
    if sorted(got) != sorted(expected):
        return [f"{case}: the parameter names changed"]
    if on_recording_machine(record):
        return [f"{case} {name}: not bitwise equal to the record"
                for name, values in expected.items() if got[name]["sha256"] != values["sha256"]]
    tolerance = record["tolerance"]["relative"]
    return [f"{case} {name}: off the record by {d:.1e} of its L2 norm, over the tolerance {tolerance:.1e}"
            for name, values in expected.items() if (d := deviation(values, got[name])) > tolerance]


@pytest.mark.parametrize("case", CASES)
def test_numbers_unchanged(case):
    found = differences(json.loads(RECORD.read_text()), case, summary(measure(fixed_model(case))))
    assert not found, "\n".join(found)


OTHER_CPU = "GenuineIntel Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz (family 6, model 106, stepping 6)"
IDENTIFIED = pytest.mark.skipif(cpu() is None, reason="this CPU is not identified, so no record is bitwise here")


def record_made_here(case: str) -> dict:
    record = json.loads(RECORD.read_text())
    return record | {"machine": machine(), "cases": {case: summary(measure(fixed_model(case)))}}


@pytest.mark.parametrize("recorded_on, bits_altered, agrees", [
    pytest.param({}, False, True, marks=IDENTIFIED),  # this machine, the same bits
    pytest.param({}, True, False, marks=IDENTIFIED),  # this machine: one tensor's sha256 altered, its sums kept
    ({"cpu": OTHER_CPU}, True, True),  # another CPU model: by tolerance, which the sums meet
    ({"cpu": None}, True, True),  # an unidentified CPU is never trusted bitwise
])
def test_bitwise_only_where_the_record_names_this_machine(recorded_on, bits_altered, agrees):
    record = record_made_here("depth_attention")
    record["machine"] |= recorded_on
    if bits_altered:
        record["cases"]["depth_attention"]["logits"]["sha256"] = "0" * 64
    found = differences(record, "depth_attention", summary(measure(fixed_model("depth_attention"))))
    assert (found == []) == agrees, found


@pytest.mark.parametrize("case", ["depth_attention", "mhc-looped"])  # mhc-looped: the farthest from the record here
def test_the_record_keyed_to_another_cpu_model_passes_by_tolerance(case):
    record = json.loads(RECORD.read_text()) | {"machine": machine() | {"cpu": OTHER_CPU}}
    assert differences(record, case, summary(measure(fixed_model(case)))) == []


@pytest.mark.parametrize("case, parameter, index", [
    ("value_residual", "model.cross_layer.lambdas", (0, 0)),  # a learned mixing weight
    ("depth_attention", "model.layers.1.self_attn.q_norm.weight", (0,)),  # parameter-free mixing: its queries
])
def test_a_small_real_change_fails_the_tolerance(case, parameter, index):
    model = fixed_model(case)
    with torch.no_grad():
        model.get_parameter(parameter)[index] += 1e-3
    record = json.loads(RECORD.read_text()) | {"machine": machine() | {"cpu": OTHER_CPU}}
    assert differences(record, case, summary(measure(model)))


@contextmanager
def float64_throughout():
    """Methods call `.float()` to mix in float32 at least (their weights may be bfloat16); in the float64 run of
    the tolerance measurement it keeps float64."""
    to_float = torch.Tensor.float
    torch.Tensor.float = lambda self, *args, **kwargs: (
        self if self.dtype == torch.float64 else to_float(self, *args, **kwargs))
    try:
        yield
    finally:
        torch.Tensor.float = to_float


def measure_tolerance() -> dict:
    worst, where = 0.0, ""
    for case in CASES:
        got = summary(measure(fixed_model(case)))
        with float64_throughout():
            exact = summary(measure(fixed_model(case).double()))
        for against, reference in (("float64", exact), ("1 thread", summary(measure(fixed_model(case), threads=1)))):
            for name in got:
                if (d := deviation(reference[name], got[name])) > worst:
                    worst, where = d, f"{case} {name}, float32 at {THREADS} threads against {against}"
    return {"relative": FACTOR * worst, "measured": worst, "factor": FACTOR, "largest at": where,
            "measured on": machine(),
            "how": f"Every case ran in float32 at {THREADS} threads, in float64 (the same weights cast to double) "
                   "and in float32 at 1 thread; measured is the largest difference of a summary from its float64 or "
                   "1-thread value, relative to the tensor's L2 norm; relative = measured x factor bounds a "
                   "summary's difference from the record, relative to the L2 norm, off the recording machine."}


def write(machine_key: dict, tolerance: dict, cases: dict) -> None:
    """Write the record whole or not at all: a temporary file beside it, then renamed over it."""
    temporary = RECORD.with_name(RECORD.name + ".tmp")
    temporary.write_text(json.dumps({"machine": machine_key, "tolerance": tolerance, "cases": cases}, indent=1) + "\n")
    temporary.replace(RECORD)


def rekey(record: dict) -> dict:
    """The record's cases with the summaries they lack added, every recorded value kept; exits where this machine
    does not reproduce every recorded sha256."""
    got = {case: summary(measure(fixed_model(case))) for case in CASES}
    recorded = sorted((case, name) for case in record["cases"] for name in record["cases"][case])
    if recorded != sorted((case, name) for case in got for name in got[case]):
        sys.exit("refused: the cases or parameter names changed; regenerate if a change of numbers is intended")
    differing = [f"{case} {name}" for case, name in recorded
                 if got[case][name]["sha256"] != record["cases"][case][name]["sha256"]]
    if differing:
        sys.exit(f"refused: {len(differing)} of {len(recorded)} recorded tensors are not bitwise equal on this "
                 f"machine (first: {differing[0]}), so it cannot vouch for the recorded bits. Re-key on a machine "
                 f"that reproduces them (the record names {record['machine']}), or regenerate if a change of "
                 f"numbers is intended.\nThis machine: {machine()}")
    return {case: {name: got[case][name] | values for name, values in entries.items()}
            for case, entries in record["cases"].items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--rekey", action="store_true", help="keep every recorded number; where this machine "
                      "reproduces every sha256, name it as the recording machine and add the missing summaries")
    mode.add_argument("--tolerance", action="store_true", help="keep the numbers and the machine; measure the "
                      "tolerance again")
    mode.add_argument("--add-cases", action="store_true", help="keep every recorded case; record those it lacks")
    args = parser.parse_args()
    if args.rekey or args.tolerance or args.add_cases:
        old = json.loads(RECORD.read_text())
        if args.add_cases:
            added = {case: summary(measure(fixed_model(case))) for case in CASES if case not in old["cases"]}
            write(old["machine"], old["tolerance"], old["cases"] | added)
        elif args.rekey:
            write(machine(), old["tolerance"], rekey(old))
        else:
            write(old["machine"], measure_tolerance(), old["cases"])
    else:
        write(machine(), measure_tolerance(), {case: summary(measure(fixed_model(case))) for case in CASES})
    print(f"wrote {RECORD}, recording machine {json.loads(RECORD.read_text())['machine']}")
