# The CompCap gateway: `compcap serve` from the serve-only lock, as a non-root user.
#   make image                                     # on the local base (scripts/base_image.sh), no registry
#   make image VARIANT=serve-gpu                   # embedded onnxruntime, CUDA
#   make image VARIANT=serve-triton                # COMPCAP_BACKEND=triton
# or by hand, on the pinned python:…-slim images of a registry (always --format docker: the OCI format
# drops the HEALTHCHECK):
#   podman build --format docker -t compcap-gateway:0.1.0-cpu .
#   podman build --format docker --build-arg VARIANT=serve-triton -t compcap-gateway:0.1.0-triton .
#   podman run -p 8080:8080 --read-only -v compcap-state:/var/lib/compcap compcap-gateway:0.1.0-cpu
# (--read-only needs the state volume; any UID in group 0 may run it, e.g. --user 12345:0).
# The image carries the default model repository at /models (the one in this tree); mount another there.
# Probe sets are not in it: mount a repository that has them, or see k8s/components/probesets.
# Triton itself runs NVIDIA's tritonserver image (see k8s/ and README). docs/operations.md, "Container".
#
# Nothing unpinned is downloaded: the dependencies come from the variant's lock, every file by its hash
# (--require-hashes), and the project's own wheel is built from this context with the lock's setuptools
# (--no-build-isolation: no build environment is fetched) and installed with --no-index. Layers of the
# image, from the bottom: the base image, the user and its state directory, the dependencies (a copy of
# the slimmed venv, rebuilt only when the lock changes), the model repository, the code (a code change
# rebuilds only this small layer).
#
# Two bases: BUILD_IMAGE runs the build stages (pip; binutils' strip where it has it), PYTHON_IMAGE is the
# image's own. Both default to the same pinned python:…-slim (no binutils: the venv is not stripped, about
# 150 MB more); scripts/base_image.sh builds local ones (Debian's python3 with pip and binutils / python3
# alone) from the machine's apt sources.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
ARG BUILD_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# the dependencies: a venv without pip (the base image's pip installs into it with --python)
FROM ${BUILD_IMAGE} AS deps
ARG VARIANT=serve
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements-${VARIANT}.lock /tmp/requirements.lock
RUN python -m venv --without-pip /opt/compcap \
    && python -m pip --python /opt/compcap/bin/python install --no-cache-dir --no-deps --require-hashes \
        -r /tmp/requirements.lock

# the project's wheel, built with the setuptools of the lock (requirements-*.lock pins it with its hashes),
# installed under /staged as it will lie in the image (bytecode compiled for its final paths)
FROM deps AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY export ./export
COPY sceneworld ./sceneworld
COPY loadtests ./loadtests
COPY client ./client
RUN python -m pip --python /opt/compcap/bin/python wheel --no-cache-dir --no-deps --no-build-isolation \
        --no-index --wheel-dir /wheels . \
    && python -m pip --python /opt/compcap/bin/python install --no-cache-dir --no-deps --no-index \
        --no-compile --root /staged /wheels/compcap-*.whl \
    && /opt/compcap/bin/python -m compileall -q -s /staged -p / /staged/opt/compcap

# the venv the image runs: what the gateway never loads left out — the test suites the wheels ship
# (27 MB) and setuptools (the wheel's build tool, 8 MB) — and, where the build image has binutils, the
# symbols of the compiled modules stripped (~146 MB, nearly all of it the debug information of spaCy's,
# thinc's and uvloop's modules; docs/operations.md, "Size"). Not stripped: what auditwheel patched (an RPATH, or a vendored library under
# *.libs/: strip breaks their program headers), onnxruntime and NVIDIA's CUDA wheels (release builds).
# Every stripped file must load again (dlopen), or the build fails.
FROM deps AS venv
RUN site=/opt/compcap/lib/python3.11/site-packages \
    && rm -rf "$site"/setuptools "$site"/setuptools-*.dist-info "$site"/pkg_resources "$site"/_distutils_hack \
        "$site"/distutils-precedence.pth \
    && find "$site" -depth -type d -name tests -exec rm -rf {} + \
    && if command -v strip >/dev/null; then \
        find "$site" -type f -name '*.so*' ! -path '*/nvidia/*' ! -path '*/onnxruntime/*' ! -path '*.libs/*' \
            -exec sh -c 'for f; do readelf -d "$f" | grep -q "R[UN]*PATH" || echo "$f"; done' sh {} + \
            > /tmp/stripped.txt \
        && xargs -r -a /tmp/stripped.txt strip --strip-unneeded \
        && xargs -r -a /tmp/stripped.txt /opt/compcap/bin/python -c \
            'import ctypes, sys; [ctypes.CDLL(f) for f in sys.argv[1:]]'; \
    fi

# the image's user and its state directory, writable by the user and by group 0 (an arbitrary UID, as
# OpenShift runs images, is in group 0); the image takes /etc/passwd, /etc/group and the directory
FROM ${PYTHON_IMAGE} AS user
RUN groupadd --system --gid 10001 compcap \
    && useradd --system --uid 10001 --gid compcap --no-create-home --shell /usr/sbin/nologin compcap \
    && mkdir -p /state/var/lib/compcap \
    && chown 10001:0 /state/var/lib/compcap \
    && chmod 0775 /state/var/lib/compcap

# the image: copies only, no RUN (a RUN step would leave the build's mount points of pip's configuration
# and the CA bundle behind, empty, in its layer)
FROM ${PYTHON_IMAGE}
COPY --from=user /etc/passwd /etc/group /etc/
COPY --from=user /state/ /
COPY --from=venv /opt/compcap /opt/compcap
COPY model_repo /models
# the code: the wheel's files as installed above, one small layer (no bind mount: buildah 1.28 reuses a
# cached `RUN --mount=type=bind,from=…` layer after the mounted files change)
COPY --from=wheel /staged/ /
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
