"""The lowest transformers release pyproject.toml allows, tested beside the installed (newest) one.

`python -m tests.test_transformers_range` (a step of `make test`) installs that release, without its dependencies,
as `<venv>/transformers-lower/` (with any dependency whose installed version it does not accept) and writes
`.done` there. Without a registry it says why and exits 0 without `.done` (the next `make test` tries again), and
the test skips with the reason. The test runs a focused part of the suite in a process that imports transformers
from that folder first: the shims of depthattn/compat.py, cached decoding, generate, save and load, checkpointing,
continuous batching, loading by transformers' server.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
TARGET = Path(sys.prefix) / "transformers-lower"
TESTS = [
    "tests/test_compat.py",
    "tests/model/test_cache.py::test_token_by_token_decoding_matches_full_forward[depth_stride=2,depth_mix_states=kv]",
    "tests/model/test_cache.py::test_greedy_generate_equals_argmax_of_uncached_forward[default]",
    "tests/model/test_model.py::test_save_reload_through_auto_classes",
    "tests/model/test_model.py::test_the_base_model_takes_transformers_arguments_by_name_and_returns_tuples",
    "tests/model/test_gradient_checkpointing.py::test_same_gradients_with_checkpointing[depth_attention-True]",
    "tests/model/test_continuous_batching.py::test_looped_generate_batch_equals_generate[depth_attention]",
    "tests/test_serve.py::test_transformers_server_loads_a_depthattn_folder",
    "tests/test_serve.py::test_a_stop_string_begun_by_the_prompt_does_not_end_the_answer",  # the in-process server's
]


def transformers_requirement(extra: str | None = None) -> Requirement:
    """The transformers requirement in pyproject.toml, of the dependencies or of an extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["optional-dependencies"][extra] if extra else project["dependencies"]
    (requirement,) = [r for r in map(Requirement, listed) if r.name == "transformers"]
    return requirement


def lower_bound() -> str:
    (version,) = [spec.version for spec in transformers_requirement().specifier if spec.operator == ">="]
    return version


def accepts(requirement: Requirement) -> bool:
    """Whether this environment's installed version of the package satisfies `requirement`."""
    try:
        return requirement.specifier.contains(importlib.metadata.version(requirement.name), prereleases=True)
    except importlib.metadata.PackageNotFoundError:
        return False


def install():
    version = lower_bound()
    with tempfile.TemporaryDirectory(dir=sys.prefix) as tmp:
        folder = Path(tmp, TARGET.name)
        # --no-compile: seconds instead of most of a minute; the few modules the test imports compile then
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", folder]
        if subprocess.run([*pip, f"transformers=={version}.*"]).returncode:
            return print(f"{TARGET.name}: could not install transformers {version}.*; its test will skip",
                         file=sys.stderr)
        (dist,) = importlib.metadata.distributions(name="transformers", path=[str(folder)])
        needed = [r for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate()]
        unmet = [r for r in needed if not accepts(r)]
        if unmet and subprocess.run([*pip, *map(str, unmet)]).returncode:
            return print(f"{TARGET.name}: could not install {', '.join(map(str, unmet))}; its test will skip",
                         file=sys.stderr)
        shutil.rmtree(TARGET, ignore_errors=True)
        os.replace(folder, TARGET)  # whole or not at all
    (TARGET / ".done").touch()


def test_the_serve_extra_allows_the_same_transformers():
    assert transformers_requirement("serve").specifier == transformers_requirement().specifier


def test_the_focused_suite_names_tests_that_exist(request):
    """Checked with the installed transformers, so that a renamed test fails here, where no lower release is
    needed, and not only where one is installed: against this session's collection (`make test` collects them all),
    and in a collecting process for any it left out."""
    collected = {item.nodeid for item in request.session.items}
    if not (unseen := [test for test in TESTS if test not in collected and not any(
            node.startswith(f"{test}::") for node in collected)]):
        return
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                             "no:xdist", *unseen], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]  # 4: a test not found


def test_the_lowest_supported_transformers_passes_the_focused_suite():
    version = lower_bound()
    if not (TARGET / ".done").is_file():
        pytest.skip(f"no {TARGET}: `make test` installs transformers {version}.* there "
                    "(python -m tests.test_transformers_range)")
    run = "import sys, pytest, transformers; print('transformers', transformers.__version__); sys.exit(pytest.main())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TARGET), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", run, "-p", "no:cacheprovider", "-p", "no:xdist", *TESTS],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert result.stdout.startswith(f"transformers {version}"), result.stdout[:200]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


if __name__ == "__main__":
    install()
