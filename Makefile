# ipusim: the two set-up commands of the README are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-all docs-test notebooks lab lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) examples/tutorials/tut7.py --device model-ipu2 10000 1000

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 --dist worksteal -q

test-all: $(STAMP)
	$(PY) -m pytest -n 2 --dist worksteal -q

docs-test: $(STAMP)
	$(PY) -m pytest tests/test_docs_examples.py tests/test_readme.py -n 2 -q

# Executes each notebook on a copy under runs/notebooks/, keeping its outputs.
notebooks: $(STAMP)
	mkdir -p runs/notebooks
	for nb in examples/notebooks/*.ipynb; do \
		cp $$nb runs/notebooks/ && \
		$(VENV)/bin/jupyter execute --inplace runs/notebooks/$$(basename $$nb) || exit 1; \
	done

# JupyterLab (the `notebook` extra) on the example notebooks.
lab: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,notebook]'
	$(VENV)/bin/jupyter lab examples/notebooks

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) benchmarks/bench_machine.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache runs
