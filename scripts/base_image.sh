#!/usr/bin/env bash
# `make base-image`: CompCap's Python base images without a registry — a minimal Debian root filesystem
# with the distribution's Python, built by mmdebstrap from this machine's own apt sources and imported
# into podman's local storage:
#
#   localhost/compcap-base:<suite>-<key>         the runtime: python3 (Debian's 3.11 on bookworm), nothing
#                                                else (the serve image's final stage, the probe-set image)
#   localhost/compcap-base:<suite>-<key>-build   the same plus pip and binutils (the Dockerfile's build
#                                                stages: pip installs the lock, strip shrinks the venv)
#
# <key> is a content key: the first 12 hex digits of the SHA-256 of the recipe below (suite, variant,
# package lists, path filters, hooks). An image that already exists under its key is not built again,
# so the first run takes a minute or two (the download) and every later one a second; a change of the
# recipe builds new ones under a new key. The images live in podman's storage (`podman images
# localhost/compcap-base`); `make clean-images` removes them.
#
# Usage: scripts/base_image.sh [--suite bookworm] [--sources FILE]
#   prints, last, two lines to eval or pass on as build arguments:
#   PYTHON_IMAGE=localhost/compcap-base:bookworm-<key>
#   BUILD_IMAGE=localhost/compcap-base:bookworm-<key>-build
# The apt sources default to this machine's Debian sources (/etc/apt/sources.list.d/debian.sources, else
# /etc/apt/sources.list); nothing else of the machine's apt configuration reaches the images. Two runs at
# once wait for each other (flock), so a base is built once.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/podman_env.sh
. scripts/podman_env.sh

suite=bookworm
sources=
while [ $# -gt 0 ]; do
    case $1 in
        --suite) suite=$2; shift 2 ;;
        --sources) sources=$2; shift 2 ;;
        *) echo "usage: $0 [--suite SUITE] [--sources FILE]" >&2; exit 2 ;;
    esac
done
if [ -z "$sources" ]; then
    for candidate in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
        if [ -s "$candidate" ]; then sources=$candidate; break; fi
    done
fi
[ -n "$sources" ] || { echo "base_image: no apt sources on this machine (pass --sources FILE)" >&2; exit 1; }
ensure_podman || exit 1

RUNTIME_PACKAGES="python3,python-is-python3"
BUILD_PACKAGES="$RUNTIME_PACKAGES,python3-pip,binutils"
# the slim images' filters: no documentation (but the copyright files), manual pages or translations
DPKG_FILTERS=(
    "path-exclude=/usr/share/doc/*"
    "path-include=/usr/share/doc/*/copyright"
    "path-exclude=/usr/share/man/*"
    "path-exclude=/usr/share/info/*"
    "path-exclude=/usr/share/locale/*"
    "path-exclude=/usr/share/lintian/*"
)
# merged /usr by symlinks (as debootstrap does): bookworm's usrmerge package would pull in perl (~50 MB)
HOOK_DIR=/usr/share/mmdebstrap/hooks/merged-usr
CLEANUP='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/* "$1"/etc/apt/apt.conf.d/99mmdebstrap'
IMAGE_CONFIG=(
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    --change "ENV LANG=C.UTF-8"
    --change 'CMD ["python3"]'
)

recipe=$(printf '%s\n' "suite=$suite" "variant=minbase" "arch=$(dpkg --print-architecture)" \
    "runtime=$RUNTIME_PACKAGES" "build=$BUILD_PACKAGES" "${DPKG_FILTERS[@]}" "hooks=$HOOK_DIR" \
    "cleanup=$CLEANUP" "${IMAGE_CONFIG[@]}" "recommends=false")
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-12)
runtime_ref=localhost/compcap-base:$suite-$key
build_ref=$runtime_ref-build

build() {  # build() REF PACKAGES: one root filesystem, imported as REF
    local ref=$1 packages=$2 tmp start filters=()
    if podman image exists "$ref"; then
        echo "base_image: $ref is cached" >&2
        return 0
    fi
    for f in "${DPKG_FILTERS[@]}"; do filters+=("--dpkgopt=$f"); done
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" RETURN
    start=$SECONDS
    echo "base_image: building $ref (mmdebstrap $suite minbase + $packages)" >&2
    mmdebstrap --quiet --variant=minbase --include="$packages" --aptopt='APT::Install-Recommends "false"' \
        "${filters[@]}" --hook-dir="$HOOK_DIR" --customize-hook="$CLEANUP" \
        "$suite" "$tmp/rootfs.tar" "$sources" >"$tmp/mmdebstrap.log" 2>&1 || {
        tail -n 30 "$tmp/mmdebstrap.log" >&2
        echo "base_image: mmdebstrap failed (its log's last lines above)" >&2
        return 1
    }
    podman import --quiet "${IMAGE_CONFIG[@]}" --change "LABEL org.compcap.base-key=$key" \
        --message "mmdebstrap $suite minbase + $packages (scripts/base_image.sh, key $key)" \
        "$tmp/rootfs.tar" "$ref" >/dev/null
    echo "base_image: $ref built in $((SECONDS - start)) s, $(podman image inspect --format '{{.Size}}' "$ref" \
        | awk '{printf "%.0f MB", $1 / 1e6}')" >&2
}

exec 9> "${TMPDIR:-/tmp}/compcap-base-image.lock"
flock 9
build "$runtime_ref" "$RUNTIME_PACKAGES"
build "$build_ref" "$BUILD_PACKAGES"
echo "PYTHON_IMAGE=$runtime_ref"
echo "BUILD_IMAGE=$build_ref"
