#!/usr/bin/env bash
# `make image`: build the gateway image (Dockerfile) or the probe-set image
# (k8s/components/probesets/Dockerfile) with podman, on the local base images of scripts/base_image.sh
# (no registry) unless PYTHON_IMAGE / BUILD_IMAGE name others (e.g. the Dockerfile's pinned python:…-slim
# default: PYTHON_IMAGE=default BUILD_IMAGE=default).
#
#   scripts/build_image.sh [--variant serve|serve-gpu|serve-triton] [--tag TAG] [--context DIR]
#   scripts/build_image.sh --probesets --context REPO_DIR [--tag TAG]    # REPO_DIR: after `compcap probesets`
#   scripts/build_image.sh --variant serve-gpu --check-lock     # no image: every file of the variant's lock
#       downloaded and hash-checked by the build image's pip, into memory (what the deps stage would install)
#
# Always --format docker (the OCI format drops HEALTHCHECK). pip inside the build reads this machine's pip
# configuration files and CA bundle, mounted read-only for the build's RUN steps, never copied into the
# image (egress may be TLS-intercepted, the index may be a mirror): /etc/pip.conf, /etc/xdg/pip,
# ~/.config/pip, ~/.pip and /etc/ssl/certs/ca-certificates.crt, those that exist. Prints the image ID last.
# Default tags: compcap-gateway:<version>-cpu|-gpu|-triton, compcap-probesets:<version>.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/podman_env.sh
. scripts/podman_env.sh

variant=serve
tag=
context=.
probesets=0
check_lock=0
while [ $# -gt 0 ]; do
    case $1 in
        --variant) variant=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --context) context=$2; shift 2 ;;
        --probesets) probesets=1; shift ;;
        --check-lock) check_lock=1; shift ;;
        *) echo "usage: $0 [--variant serve|serve-gpu|serve-triton] [--probesets|--check-lock] [--tag TAG]" \
               "[--context DIR]" >&2
           exit 2 ;;
    esac
done
ensure_podman || exit 1
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)

# the bases: the local ones, built (or found cached) by scripts/base_image.sh, unless given
if [ -z "${PYTHON_IMAGE:-}" ] || [ -z "${BUILD_IMAGE:-}" ]; then
    bases=$(bash scripts/base_image.sh)
    PYTHON_IMAGE=${PYTHON_IMAGE:-$(sed -n 's/^PYTHON_IMAGE=//p' <<< "$bases")}
    BUILD_IMAGE=${BUILD_IMAGE:-$(sed -n 's/^BUILD_IMAGE=//p' <<< "$bases")}
fi
args=(--format docker)
[ "$PYTHON_IMAGE" = default ] || args+=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")

if [ "$probesets" = 1 ]; then
    [ -f "$context/manifest.json" ] && [ -d "$context/probes" ] || {
        echo "build_image: $context has no manifest.json and probes/ (run compcap probesets --repo $context)" >&2
        exit 1
    }
    tag=${tag:-compcap-probesets:$version}
    args=(--format docker)
    [ "$PYTHON_IMAGE" = default ] || args+=(--build-arg "BASE_IMAGE=$PYTHON_IMAGE")
    podman build "${args[@]}" -f k8s/components/probesets/Dockerfile -t "$tag" "$context" >&2
    podman image inspect --format '{{.Id}}' "$tag"
    exit 0
fi

case $variant in
    serve) suffix=cpu ;;
    serve-gpu) suffix=gpu ;;
    serve-triton) suffix=triton ;;
    *) echo "build_image: unknown variant $variant (serve, serve-gpu, serve-triton)" >&2; exit 2 ;;
esac
tag=${tag:-compcap-gateway:$version-$suffix}
[ "$BUILD_IMAGE" = default ] || args+=(--build-arg "BUILD_IMAGE=$BUILD_IMAGE")
args+=(--build-arg "VARIANT=$variant")
# pip's configuration and the CA bundle, for the RUN steps only
mounts=()
for path in /etc/pip.conf /etc/xdg/pip /etc/ssl/certs/ca-certificates.crt; do
    if [ -e "$path" ]; then mounts+=(-v "$path:$path:ro"); fi
done
for path in .config/pip .pip; do  # the user's, where the build's root (HOME=/root) reads them
    if [ -e "$HOME/$path" ]; then mounts+=(-v "$HOME/$path:/root/$path:ro"); fi
done
if [ "$check_lock" = 1 ]; then
    [ "$BUILD_IMAGE" != default ] || BUILD_IMAGE=$(sed -n 's/^ARG BUILD_IMAGE=//p' "$context/Dockerfile")
    lock=$(cd "$context" && pwd)/requirements-$variant.lock
    podman run --rm "${mounts[@]}" -v "$lock:/tmp/requirements.lock:ro" \
        --tmpfs /wheels:size=8g "$BUILD_IMAGE" sh -ec 'python -m pip download --quiet --no-cache-dir --no-deps \
            --require-hashes --only-binary :all: --dest /wheels -r /tmp/requirements.lock
            echo "requirements-'"$variant"'.lock: $(ls /wheels | wc -l) files, $(du -sh /wheels | cut -f1)," \
                "every hash checked"'
    exit 0
fi
podman build "${args[@]}" "${mounts[@]}" -f "$context/Dockerfile" -t "$tag" "$context" >&2
podman image inspect --format '{{.Id}}' "$tag"
