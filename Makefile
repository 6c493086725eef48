PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup storm test test-slow conformance bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

storm: $(STAMP)
	$(BIN)/soak storm

conformance: $(STAMP)
	$(BIN)/soak conformance --store sqlite:

test: $(STAMP)
	$(BIN)/pytest -q models --store memory:
	$(BIN)/pytest -q models --store sqlite:
	$(BIN)/pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

test-slow: $(STAMP)
	$(BIN)/pytest -n 2 -q -m slow

clean:
	rm -rf $(VENV) build *.egg-info
