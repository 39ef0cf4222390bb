"""transformers' own common tests, taken from the source distribution of the installed transformers version.

`python -m tests.native.sdist` (a step of `make test`) downloads that sdist from the package registry and keeps its
tests/ folder as `<venv>/transformers-tests/<version>/` and writes `<venv>/transformers-tests/.done` (`parameterized`,
which those tests import beyond transformers' own dependencies, is in our dev extra). Without a registry it says why and
exits 0 without `.done` (the next `make test` tries again); the tests that need the folder then skip with the
reason. `import_common_tests` imports the folder as the package `transformers_sdist_tests`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import pytest

from tests.native import standins

ROOT = Path(sys.prefix) / "transformers-tests"  # in the venv whose transformers they test
PACKAGE = "transformers_sdist_tests"
# Modules the common tests import that the sdist leaves out: each is given the stand-in of the same name.
MISSING_MODULES = {
    "exporters.test_export": "ExportTesterMixin",
    "generation.test_utils": "GenerationTesterMixin",
    "utils.test_configuration_utils": "config_common_kwargs",
}


def tests_dir() -> Path:
    return ROOT / importlib.metadata.version("transformers")


def fetch():
    """Download the installed version's sdist and keep its tests/ folder (once per version)."""
    ROOT.mkdir(parents=True, exist_ok=True)
    target = tests_dir()
    version = target.name
    if not (target / "__init__.py").is_file():
        with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
            download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        "--dest", tmp, f"transformers=={version}"]
            if subprocess.run(download).returncode:
                return warn(f"could not download the transformers {version} sdist")
            (archive,) = Path(tmp).glob("transformers-*.tar.gz")
            prefix = f"{archive.name.removesuffix('.tar.gz')}/tests/"
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
                if unsafe := unsafe_members(members):
                    return warn(f"the transformers {version} sdist has entries that would leave its folder: {unsafe}")
                # and the stdlib's own filter where Python has it (3.11.4+; 3.12 and 3.13 warn without it)
                tar.extractall(tmp, members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            # transformers' repository has an empty tests/__init__.py; the sdist leaves it out, yet
            # test_configuration_common.py loads it (`direct_transformers_import`)
            Path(tmp, prefix, "__init__.py").touch()
            os.replace(Path(tmp, prefix), target)  # whole or not at all
    for old in ROOT.iterdir():  # another version's
        if old.is_dir() and old != target:
            shutil.rmtree(old)
    (ROOT / ".done").touch()


def unsafe_members(members: list[tarfile.TarInfo]) -> list[str]:
    """Names of entries that are not plain files or folders or that point outside the archive's folder: the refusals
    of `extractall(filter="data")`, which Python 3.11 before 3.11.4 (Debian 12's 3.11.2) lacks."""
    return [m.name for m in members
            if not (m.isfile() or m.isdir()) or Path(m.name).is_absolute() or ".." in Path(m.name).parts]


def warn(problem: str):
    print(f"tests/native: {problem}; transformers' common tests will skip", file=sys.stderr)


def import_common_tests() -> types.ModuleType:
    """The sdist's tests/ as the package `transformers_sdist_tests`, its common model and configuration tests
    imported, with our stand-ins for the modules it lacks; skips the calling test module, saying why, where the
    folder or `parameterized` is missing."""
    folder = tests_dir()
    if not (folder / "__init__.py").is_file():
        pytest.skip(f"transformers' common tests: no {folder}, the tests/ folder of the installed transformers' "
                    "sdist (`make test` downloads it: python -m tests.native.sdist)", allow_module_level=True)
    if importlib.util.find_spec("parameterized") is None:
        pytest.skip("transformers' common tests need parameterized (the dev extra: pip install -e '.[dev]')",
                    allow_module_level=True)
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(PACKAGE, folder / "__init__.py")
        package = sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(package)
        for name, attribute in MISSING_MODULES.items():
            parent = name.split(".")[0]
            sys.modules.setdefault(f"{PACKAGE}.{parent}", types.ModuleType(f"{PACKAGE}.{parent}"))
            module = sys.modules[f"{PACKAGE}.{name}"] = types.ModuleType(f"{PACKAGE}.{name}")
            setattr(module, attribute, getattr(standins, attribute))
    for name in ("test_configuration_common", "test_modeling_common"):
        importlib.import_module(f"{PACKAGE}.{name}")
    return sys.modules[PACKAGE]


if __name__ == "__main__":
    fetch()
