# The CompCap gateway: `compcap serve` from the serve-only lock, as a non-root user.
#   docker build -t compcap-gateway:0.1.0-cpu .                                      # embedded onnxruntime, CPU
#   docker build --build-arg VARIANT=serve-gpu -t compcap-gateway:0.1.0-gpu .        # embedded onnxruntime, CUDA
#   docker build --build-arg VARIANT=serve-triton -t compcap-gateway:0.1.0-triton .  # COMPCAP_BACKEND=triton
#   docker run -p 8080:8080 -v compcap-state:/var/lib/compcap compcap-gateway:0.1.0-cpu
# The image carries the default model repository at /models (the one in this tree); mount another there.
# Probe sets are not in it: mount a repository that has them, or see k8s/components/probesets.
# Triton itself runs NVIDIA's tritonserver image (see k8s/ and README).
#
# Nothing unpinned is downloaded: the dependencies come from the variant's lock, every file by its hash
# (--require-hashes), and the project's own wheel is built from this context with the lock's setuptools
# (--no-build-isolation: no build environment is fetched) and installed with --no-index. Layers, from the
# bottom: the base image, the dependencies (rebuilt only when the lock changes), the model repository,
# the code (a code change rebuilds only this small layer).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# the dependencies: a venv without pip (the base image's pip installs into it with --python)
FROM ${PYTHON_IMAGE} AS deps
ARG VARIANT=serve
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements-${VARIANT}.lock /tmp/requirements.lock
RUN python -m venv --without-pip /opt/compcap \
    && python -m pip --python /opt/compcap/bin/python install --no-cache-dir --no-deps --require-hashes \
        -r /tmp/requirements.lock

# the project's wheel, built with the setuptools of the lock (requirements-*.lock pins it with its hashes)
FROM deps AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY export ./export
COPY sceneworld ./sceneworld
COPY loadtests ./loadtests
COPY client ./client
RUN python -m pip --python /opt/compcap/bin/python wheel --no-cache-dir --no-deps --no-build-isolation \
        --no-index --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 compcap \
    && useradd --system --uid 10001 --gid compcap --no-create-home --shell /usr/sbin/nologin compcap \
    && mkdir -p /var/lib/compcap \
    && chown compcap:compcap /var/lib/compcap
COPY --from=deps /opt/compcap /opt/compcap
COPY model_repo /models
# the code: the wheel of the stage above, mounted for this step only (it leaves no layer of its own)
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    python -m pip --python /opt/compcap/bin/python install --no-cache-dir --no-deps --no-index \
        /wheels/compcap-*.whl
ENV PATH=/opt/compcap/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    COMPCAP_HOST=0.0.0.0 \
    COMPCAP_PORT=8080 \
    COMPCAP_REPO=/models \
    COMPCAP_STATE_URL=sqlite:////var/lib/compcap/compcap_state.db
USER 10001:10001
WORKDIR /var/lib/compcap
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('COMPCAP_PORT', '8080') + '/readyz', timeout=2)"]
ENTRYPOINT ["compcap", "serve"]
