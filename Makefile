PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The JavaScript shim's packages (better-sqlite3 for its example store), for the tests marked `node`.
JS := adapters/js
JS_STAMP := $(JS)/node_modules/.soak-installed

.PHONY: setup storm test test-slow conformance bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Without npm the node tests skip (and fail under SOAK_REQUIRE_SERVICES=1, as in CI).
$(JS_STAMP): $(JS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(JS) --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: the JavaScript shim's tests (marker node) will skip"; fi

setup: $(STAMP) $(JS_STAMP)

storm: $(STAMP)
	$(BIN)/soak storm

conformance: $(STAMP)
	$(BIN)/soak conformance --store sqlite:

PG_URL ?= postgresql://127.0.0.1:5432/test
REDIS_URL ?= redis://127.0.0.1:6379/0

# The networked stores run the model in real time (no injectable clock): 25 programs each, not the profile's
# 100 under CI (measured on the shared 2-core machine: about 15 s for PostgreSQL, 6 s for Redis; 100 would be 78 s
# for PostgreSQL). They need both servers, as CI has.
test: $(STAMP) $(JS_STAMP)
	$(BIN)/pytest -q models --store memory:
	$(BIN)/pytest -q models --store sqlite:
	$(BIN)/pytest -q models --store $(PG_URL) --soak-examples 25
	$(BIN)/pytest -q models --store $(REDIS_URL) --soak-examples 25
	$(BIN)/pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

test-slow: $(STAMP) $(JS_STAMP)
	$(BIN)/pytest -n 2 -q -m slow

clean:
	rm -rf $(VENV) build *.egg-info $(JS)/node_modules
