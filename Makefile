# `make test` and `make demo` bootstrap .venv on a machine that has only Python.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
VLLM_VENV := .venv-vllm
PY := $(VENV)/bin/python

.PHONY: test typecheck test-torch-newest demo study study-report clean

# torch through pip, which reads the machine's own pip configuration (a wheel on disk, an index of CPU builds); the
# rest through uv, several times faster, which keeps that torch. Bytecode is left to first import, as uv does.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile "$(TORCH)" "uv>=0.5"
	$(VENV)/bin/uv pip install --quiet --python $(PY) -e ".[dev,analysis,parquet,eval,serve,wikipedia]"
	touch $@

# transformers' own common model tests (tests/native) come from the installed version's sdist; without a registry
# the step says so and leaves no stamp (the next run tries again), and those tests skip with the reason
$(VENV)/transformers-tests/.done: $(VENV)/.installed
	$(PY) -m tests.native.sdist

# the lowest transformers release pyproject.toml allows, beside the venv's, for tests/test_transformers_range.py;
# likewise without a registry: no stamp, and that test skips with the reason
$(VENV)/transformers-lower/.done: $(VENV)/.installed
	$(PY) -m tests.test_transformers_range

# vLLM's venv for tests/vllm (tests/vllm/setup_env.py): torch and vLLM while the main venv installs, depthattn
# after the main venv's editable install, which writes the same src/depthattn.egg-info
$(VLLM_VENV)/.base:
	$(PYTHON) tests/vllm/setup_env.py --base

$(VLLM_VENV)/.installed: $(VLLM_VENV)/.base $(VENV)/.installed
	$(PYTHON) tests/vllm/setup_env.py

# the lint and type check beside the other venvs' installs (which mostly wait on files); one pytest-xdist worker per
# CPU, a module's tests on one worker (they share its fixtures), the longest modules first (tests/conftest.py).
# Python caches bytecode even where PYTHONDONTWRITEBYTECODE is set: each of the ~90 processes the tests start would
# otherwise compile torch and transformers again.
test:
	$(MAKE) -j3 --output-sync=target typecheck $(VENV)/transformers-tests/.done $(VENV)/transformers-lower/.done \
		$(VLLM_VENV)/.installed
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n logical --dist loadscope --no-loadscope-reorder --durations=15

# mypy checks src/ as pyproject.toml's [tool.mypy] says (a minute or two the first time, seconds from .mypy_cache/)
typecheck: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m mypy

demo: $(VENV)/.installed
	$(VENV)/bin/depthattn demo

# The whole study (hours on 2 cores; resumable, finished cells are skipped), then its pages in docs/results/ and
# their tables pasted into README.md and docs/results.md.
ANALYSES := depth_axis wikipedia_orderings three_corpora_orderings headline
STUDIES := core retrofit budget depth tokenization ablations search confirm moda budget_wsd budget_sweep \
           budget_sweep_layers4 budget_sweep_wiki budget_sweep_layers16 lr_sweep_wiki budget_sweep_wiki_seeds10 \
           budget_sweep_seeds10 budget_sweep_linuxdoc lr_sweep_linuxdoc lr_sweep_embedded \
           lr_sweep_layers4 lr_sweep_layers16
# studies run on a GPU (benchmarks/gpu.sh): here only their reports
GPU_STUDIES := ladder_smoke
# the linux-doc sweeps' corpus, the Debian package linux-doc-6.1 (depthattn/data/linux_doc.py): installed where it
# is missing and this is root with apt-get; elsewhere those sweeps, run last, stop and say how
# (the build whose text the sweep declares by its sha256; another is installed where the mirror lacks it, and the
# sweep refuses it by name)
LINUX_DOC := /usr/share/doc/linux-doc-6.1/html/_sources
LINUX_DOC_BUILD := 6.1.192-3
$(LINUX_DOC):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			linux-doc-6.1=$(LINUX_DOC_BUILD) || \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-doc-6.1; } || \
		echo "make: installing linux-doc-6.1 failed; the linux-doc sweeps, run last, stop there"; \
	else echo "make: linux-doc-6.1 is not installed (as root: apt-get install linux-doc-6.1);" \
		"the linux-doc sweeps, run last, stop there"; fi
study: $(VENV)/.installed $(LINUX_DOC)
	$(VENV)/bin/depthattn study $(STUDIES:%=configs/study/%.toml) --workers 2 --threads 1 --index docs/results/study.md
	$(PY) docs/paste_results.py

study-report: $(VENV)/.installed
	$(VENV)/bin/depthattn study $(STUDIES:%=configs/study/%.toml) $(GPU_STUDIES:%=configs/study/%.toml) --report-only \
		--index docs/results/study.md
	$(VENV)/bin/depthattn study $(ANALYSES:%=--analysis configs/analysis/%.toml)
	$(PY) docs/paste_results.py

# The newest torch beside `make test`'s (2.13): a focused part of the suite in a venv of its own. Opt-in: torch 2.15
# ships CUDA builds only, about 5.4 GB with their libraries, too much for every `make test`. Where a pip
# configuration caps torch lower (a machine's constraints file), PIP_CONFIG_FILE=/dev/null lifts it for this venv.
TORCH_NEWEST ?= torch==2.15.0
TORCH_NEWEST_VENV := .venv-torch-newest
TORCH_FOCUSED := tests/model/test_cache.py tests/model/test_model.py tests/model/test_qwen3_parity.py \
                 tests/model/test_frozen_behaviour.py tests/model/test_gradient_checkpointing.py \
                 tests/model/test_continuous_batching.py tests/ops/test_depth_mix.py tests/ops/test_compile.py \
                 tests/ops/test_cpu_kernel.py tests/methods/test_conformance.py tests/test_compat.py tests/train/test_train.py
$(TORCH_NEWEST_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TORCH_NEWEST_VENV)
	$(TORCH_NEWEST_VENV)/bin/pip install --quiet --no-compile "$(TORCH_NEWEST)" "uv>=0.5"
	$(TORCH_NEWEST_VENV)/bin/uv pip install --quiet --python $(TORCH_NEWEST_VENV)/bin/python -e ".[dev,analysis,serve]"
	touch $@

test-torch-newest: $(TORCH_NEWEST_VENV)/.installed
	env -u PYTHONDONTWRITEBYTECODE $(TORCH_NEWEST_VENV)/bin/python -m pytest -n logical --dist loadscope $(TORCH_FOCUSED)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TORCH_NEWEST_VENV) runs
