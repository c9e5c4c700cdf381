#!/usr/bin/env bash
# `make clean-images`: remove what CompCap's image scripts keep in podman's storage — the cached base
# images of scripts/base_image.sh (localhost/compcap-base:*), the images of `make image` and `make
# probesets-image` (localhost/compcap-gateway:*, localhost/compcap-probesets:*) and the dangling layers
# their builds cached (`podman image prune`: every dangling image of the storage) — and the storages the
# container tier left when it was killed before its teardown (/var/tmp/cctier/<pid>, pid gone).
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/containers.conf}
if ! command -v podman >/dev/null 2>&1; then
    echo "clean_images: no podman here: nothing to remove"
    exit 0
fi
images=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/compcap-(base|gateway|probesets):' || true)
if [ -n "$images" ]; then
    # shellcheck disable=SC2086
    podman rmi --force $images >/dev/null
    echo "clean_images: removed $(echo "$images" | wc -l) images: $(echo $images)"
fi
podman image prune --force >/dev/null
runs=${COMPCAP_CONTAINER_RUNS:-/var/tmp/cctier}
if [ -d "$runs" ] && [ -n "$(ls -A "$runs")" ]; then
    py=.venv/bin/python
    [ -x "$py" ] || py=python3
    PYTHONPATH=. "$py" -c 'from tests.container.tier import sweep
print("clean_images: swept", len(sweep()), "storages of killed container tiers")'
fi
