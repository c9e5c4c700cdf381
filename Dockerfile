# The CompCap gateway: `compcap serve` from the serve-only lock, as a non-root user.
#   docker build -t compcap-gateway:cpu .                                   # embedded onnxruntime, CPU
#   docker build --build-arg VARIANT=serve-gpu -t compcap-gateway:gpu .     # embedded onnxruntime, CUDA
#   docker build --build-arg VARIANT=serve-triton -t compcap-gateway:triton .  # COMPCAP_BACKEND=triton
#   docker run -p 8080:8080 compcap-gateway:cpu
# The image carries the default model repository at /models (the one in this tree); mount another there.
# Triton itself runs NVIDIA's tritonserver image with model_repo/ mounted (see k8s/ and README).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=serve
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements-${VARIANT}.lock ./
RUN python -m venv /opt/compcap \
    && /opt/compcap/bin/pip install --no-cache-dir --no-deps --require-hashes -r requirements-${VARIANT}.lock
COPY pyproject.toml README.md ./
COPY service ./service
COPY export ./export
COPY loadtests ./loadtests
# the project itself (no dependencies: the lock has them all); pip and setuptools are not needed at run time
RUN /opt/compcap/bin/pip install --no-cache-dir --no-deps . \
    && /opt/compcap/bin/pip uninstall --yes setuptools pip

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 compcap \
    && useradd --system --uid 10001 --gid compcap --no-create-home --shell /usr/sbin/nologin compcap \
    && mkdir -p /var/lib/compcap \
    && chown compcap:compcap /var/lib/compcap
COPY --from=build /opt/compcap /opt/compcap
COPY model_repo /models
ENV PATH=/opt/compcap/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    COMPCAP_HOST=0.0.0.0 \
    COMPCAP_PORT=8080 \
    COMPCAP_REPO=/models \
    COMPCAP_PROBE_HISTORY=/var/lib/compcap/probe_history.jsonl
USER 10001:10001
WORKDIR /var/lib/compcap
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('COMPCAP_PORT', '8080') + '/readyz', timeout=2)"]
ENTRYPOINT ["compcap", "serve"]
