# `make test` and `make demo` bootstrap .venv on a machine that has only Python.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[dev,analysis,parquet,eval]"
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest

demo: $(VENV)/.installed
	$(VENV)/bin/depthattn demo

clean:
	rm -rf $(VENV) runs
