"""`python -m benchmarks.startup`: the wall time of `depthattn --help` and of every `depthattn COMMAND --help`
against `transformers --help`, the console scripts of this venv, each run as a fresh process; `import depthattn`
alone is timed too, as the floor of every `depthattn` command (torch and transformers' configuration code: the
modeling code waits for the first config, and each command imports the library when it runs). After one untimed
round (the files into the page cache), every repetition runs each once, the order rotated by one each repetition,
so machine drift cancels in the ratios: medians (and quartiles) of per-repetition ratios to `transformers --help`.
Goal: every `--help` at most 1. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from depthattn.cli import COMMANDS

from .bench import machine_info
from .measure import paired_ratio, summary

BASELINE = "transformers --help"
FLOOR = "python -c 'import depthattn'"
GOAL = 1.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10, help="timed repetitions of each command (default %(default)s)")
    return p.parse_args(argv)


def command_lines() -> dict[str, list[str]]:
    scripts = Path(sys.executable).parent  # the venv's bin/, where both console scripts are
    depthattn = str(scripts / "depthattn")
    return {BASELINE: [str(scripts / "transformers"), "--help"], FLOOR: [sys.executable, "-c", "import depthattn"],
            "depthattn --help": [depthattn, "--help"],
            **{f"depthattn {name} --help": [depthattn, name, "--help"] for name in COMMANDS}}


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(lines: dict[str, list[str]], reps: int) -> dict[str, list[float]]:
    names = list(lines)
    for name in names:
        seconds(lines[name])  # untimed
    samples = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            samples[name].append(seconds(lines[name]))
        print(f"rep {rep + 1}/{reps}: {BASELINE} {samples[BASELINE][-1]:.2f} s, depthattn --help "
              f"{samples['depthattn --help'][-1]:.2f} s", file=sys.stderr, flush=True)
    return samples


def markdown(samples: dict[str, list[float]], machine: dict, reps: int, command: str) -> str:
    ratios = {name: paired_ratio(times, samples[BASELINE]) for name, times in samples.items()}
    helps = [name for name in samples if name.startswith("depthattn")]
    over = [name for name in helps if ratios[name]["median"] > GOAL]
    lines = [
        f"Start-up: `{command}`",
        "",
        f"Machine: {machine.get('cpu_model') or machine['processor']}, {machine['cpu_count']} CPUs; load average "
        f"{machine.get('load_average_at_start')} at start, {machine.get('load_average_at_end')} at end; Python "
        f"{machine['python']}, torch {machine['torch']}, transformers {machine['transformers']}.",
        f"{reps} repetitions, interleaved; wall seconds (median) and the median [quartiles] of per-repetition ratios "
        f"to `{BASELINE}`.",
        "",
        f"| command | seconds | / {BASELINE} |",
        "|---|---|---|",
    ]
    for name, times in samples.items():
        ratio = ratios[name]
        lines.append(f"| `{name}` | {summary(times)['median']:.2f} | "
                     f"{ratio['median']:.2f} [{ratio['p25']:.2f}, {ratio['p75']:.2f}] |")
    lines += ["", f"Goal: every `--help` at most {GOAL} x `{BASELINE}`: "
              + (f"not met by {len(over)} of {len(helps)}." if over else "met.")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = machine_info(torch.device("cpu"))
    samples = measure(command_lines(), args.reps)
    if hasattr(os, "getloadavg"):
        machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    command = "python -m benchmarks.startup " + " ".join(sys.argv[1:] if argv is None else argv)
    print(markdown(samples, machine, args.reps, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
