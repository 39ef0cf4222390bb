"""Timing and peak-memory helpers, and the statistics the report uses."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

CPU_MEMORY_METHOD = (
    "torch CPU allocator: bytes held before the step (parameters, buffers, optimizer state, gradients) plus "
    "the peak of the running sum of every allocation and free during the step, as recorded by torch.profiler "
    "(profile_memory=True) in a separate, untimed step"
)
CUDA_MEMORY_METHOD = (
    "bytes held before the step (parameters, buffers, optimizer state, gradients) plus the peak rise of "
    "torch.cuda.max_memory_allocated over one untimed step (after reset_peak_memory_stats)"
)


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = {
    # wall clock: what a user waits for; other processes' load on the machine shows in it
    "wall": time.perf_counter,
    # CPU time of this process (all its threads): insensitive to waiting for a busy CPU, so steadier on a shared
    # machine; with one thread it is the work done, with more it also counts OpenMP threads spinning at barriers
    "cpu": time.process_time,
}


def timed(fn: Callable[[], object], device: torch.device, clock: str = "wall") -> float:
    """Seconds `fn` takes on `clock`, the device synchronised before and after."""
    now = CLOCKS[clock]
    synchronize(device)
    start = now()
    fn()
    synchronize(device)
    return now() - start


def summary(samples: list[float]) -> dict:
    """Median, quartiles and extremes of `samples`."""
    ordered = sorted(samples)
    if not ordered:
        return {"median": None, "p25": None, "p75": None, "min": None, "max": None, "n": 0, "samples": []}
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    return {"median": statistics.median(ordered), "p25": q[0], "p75": q[2], "min": ordered[0],
            "max": ordered[-1], "n": len(ordered), "samples": list(samples)}


def paired_ratio(samples: list[float], baseline: list[float]) -> dict | None:
    """Ratios of interleaved samples taken in the same repetition (decoding: the same round), so drift cancels:
    median and quartiles."""
    pairs = [a / b for a, b in zip(samples, baseline, strict=False) if b > 0]
    if not pairs:
        return None
    stats = summary(pairs)
    return {"median": stats["median"], "p25": stats["p25"], "p75": stats["p75"], "n": stats["n"]}


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages among `tensors`."""
    seen, total = set(), 0
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.device)
        if key not in seen and storage.nbytes() > 0:
            seen.add(key)
            total += storage.nbytes()
    return total


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Parameters, buffers, gradients and optimizer state held between steps."""
    tensors = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters())]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return tensor_bytes(tensors)


def cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated (above the level at the start) by torch's CPU allocator while `fn` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort()
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    return peak


def peak_bytes(fn: Callable[[], object], device: torch.device, before: int) -> int:
    """Peak memory while `fn` runs: `before` (bytes held at its start) plus what it allocates at most."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)  # every candidate's tensors, not only this one's
        fn()
        synchronize(device)
        return before + torch.cuda.max_memory_allocated(device) - start
    return before + cpu_peak_bytes(fn)
