# Sourced by CompCap's image scripts (scripts/base_image.sh, scripts/build_image.sh) and read by the
# container tier (tests/container): podman with the project's containers.conf, installed from the OS's
# own packages where it is absent.
#
#   . scripts/podman_env.sh && ensure_podman || exit 1
#
# ensure_podman: podman, runc, netavark (with aardvark-dns and iptables for published ports) and
# mmdebstrap (the base image) from apt when one is missing — root and apt-get only; otherwise it says
# what is missing and returns 1. CONTAINERS_CONF points at scripts/containers.conf unless already set.

COMPCAP_ROOT=${COMPCAP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$COMPCAP_ROOT/scripts/containers.conf}
COMPCAP_CONTAINER_PACKAGES="podman runc netavark aardvark-dns iptables mmdebstrap"

ensure_podman() {
    local missing=() tool
    for tool in podman runc netavark mmdebstrap; do
        command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/lib/podman/$tool" ] || missing+=("$tool")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "podman_env: ${missing[*]} missing, and installing them needs root and apt-get" >&2
        return 1
    fi
    echo "podman_env: installing $COMPCAP_CONTAINER_PACKAGES (apt; ${missing[*]} missing)" >&2
    # shellcheck disable=SC2086
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        $COMPCAP_CONTAINER_PACKAGES; } >/dev/null || {
        echo "podman_env: apt-get install $COMPCAP_CONTAINER_PACKAGES failed" >&2
        return 1
    }
}
