# ipusim: the two set-up commands of the README are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-all lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) examples/tutorials/tut7.py --device model-ipu2 10000 1000

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 -q

test-all: $(STAMP)
	$(PY) -m pytest -n 2 -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) benchmarks/bench_machine.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache
