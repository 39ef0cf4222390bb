import fcntl
import json
import os
from itertools import islice

import pytest
import torch

from depthattn.data import embedded_corpus_documents, prepare
from tests.helpers import TOY, method_cases, registered_toy

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs one worker per CPU: each keeps to one thread
    os.environ["OMP_NUM_THREADS"] = "1"  # and so do the processes a test starts
    torch.set_num_threads(1)


# The modules that keep a worker busiest (40 s or more on 2 cores: `make test` prints the slowest tests), longest
# first, then the rest in their own order: `make test` keeps this order (--no-loadscope-reorder), so that no long
# module is left for the end while the other worker idles.
LONGEST_FIRST = ("tests/vllm/test_vllm.py", "tests/study/test_slurm.py", "tests/study/test_interrupt.py",
                 "tests/test_guide.py", "tests/test_cli.py", "tests/faults/test_train_signals.py",
                 "tests/faults/test_serve_faults.py", "tests/study/test_study.py", "tests/ops/test_benchmarks.py",
                 "tests/train/test_distributed.py", "tests/methods/test_outside_method.py",
                 "tests/ops/test_cpu_kernel.py", "tests/train/test_train.py")


def pytest_collection_modifyitems(config, items):
    if missing := [path for path in LONGEST_FIRST if not (config.rootpath / path).is_file()]:
        raise pytest.UsageError(f"tests/conftest.py's LONGEST_FIRST names modules that are gone: {missing}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_world(tmp_path_factory):
    """Held while a test's torch.distributed world runs: one at a time across xdist workers (tests/worlds.py)."""
    with open(tmp_path_factory.getbasetemp().parent / "one_world.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A small prepared dataset: the first 6,000 characters of 24 documents of the embedded corpus (65,214 training
    tokens, 21,557 held out: every run's final whole-split evaluation stays short), a 384-token BPE."""
    root = tmp_path_factory.mktemp("data")
    documents = [doc[:6000] for doc in islice(embedded_corpus_documents(), 24)]
    source = root / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    prepare([str(source)], root / "prepared", vocab_size=384, val_fraction=0.2, seed=0, progress=False)
    return root / "prepared"


def _case(settings: dict):
    if settings["cross_layer"] != TOY:
        yield settings
        return
    with registered_toy():
        yield settings


@pytest.fixture(params=list(method_cases()))
def method_settings(request):
    """The config settings of a conformance case (tests/helpers.py's `method_cases`: every registered method, the
    variants it declares, the outside toy), the toy registered while the test runs."""
    yield from _case(method_cases()[request.param])


@pytest.fixture(params=list(method_cases(variants=False)))
def method_defaults(request):
    """As `method_settings`, for each method at its defaults only."""
    yield from _case(method_cases(variants=False)[request.param])
