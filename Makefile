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

PG_URL ?= postgresql://127.0.0.1:5432/test
REDIS_URL ?= redis://127.0.0.1:6379/0

# The networked stores run the model in real time (no injectable clock): 25 programs each, not the profile's
# 100 under CI (measured on the shared 2-core machine: about 15 s for PostgreSQL, 6 s for Redis; 100 would be 78 s
# for PostgreSQL). They need both servers, as CI has.
test: $(STAMP)
	$(BIN)/pytest -q models --store memory:
	$(BIN)/pytest -q models --store sqlite:
	$(BIN)/pytest -q models --store $(PG_URL) --soak-examples 25
	$(BIN)/pytest -q models --store $(REDIS_URL) --soak-examples 25
	$(BIN)/pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

test-slow: $(STAMP)
	$(BIN)/pytest -n 2 -q -m slow

clean:
	rm -rf $(VENV) build *.egg-info
