#!/usr/bin/env bash
# `make test`: the test tiers as two pytest processes at once — unit, api, ops and browser beside
# integration (which mostly waits on the servers it starts) — so the waits of one overlap the work of the
# other on two cores (measured: 11 min 17 s against 13 min 09 s in one process, with browser on the
# integration side; it is on the other side since, for balance). Each tier's output is printed whole once both end,
# then one closing line over all runs; the exit status is the first non-zero of them.
#
# Then, on the fast side (the integration tier runs longer), the API tier again on each Python of
# TEST_PYTHONS (default "3.12 3.13"; 3.11 is the tiers above): in the serve-only venv of that Python
# (`make serve-venv`, from its lock; .venv-serve-312 / -313, kept between runs) with the tests' tools beside
# it (`make serve-test-tools`), serving a tiny repository this script builds once with $PY (those venvs have
# no torch). A Python with no interpreter here (python3.X on PATH or pyenv's) is skipped, saying so.
#
# Beside both, from the start, the container tier (tests/container: podman builds and runs the images,
# about 3 minutes alone, most of it two image builds; it skips with one line where the machine cannot run
# containers). It is a third process rather than a tail of either side so that its builds' disk and
# network waits overlap the others' work.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TEST_PYTHONS=${TEST_PYTHONS-3.12 3.13}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# the API tier on Python $1 in its serve-only venv; its output in $out/py$1.txt
api_on() {
    local version=$1 log="$out/py$1.txt" python svenv
    if ! python=$(bash scripts/find_python.sh "$version"); then
        echo "skipped: no Python $version here (python$version on PATH or under ~/.pyenv/versions)" > "$log"
        return 0
    fi
    svenv=.venv-serve-${version/./}
    echo "$python, $svenv" > "$log"
    env -u MAKEFLAGS -u MFLAGS make -s serve-test-tools PY="$python" SVENV="$svenv" >> "$log" 2>&1 || return 1
    if [ ! -f "$out/tiny/model_repo/manifest.json" ]; then
        "$PY" -c "import sys; from pathlib import Path; from compcap_lab.pipeline.build import build_repo
build_repo(Path(sys.argv[1]), preset='tiny', seed=0)" "$out/tiny/model_repo" > "$out/tiny.log" 2>&1 \
            || { cat "$out/tiny.log" >> "$log"; return 1; }
    fi
    COMPCAP_TEST_REPO=${COMPCAP_TEST_REPO:-$out/tiny/model_repo} PYTHONPATH="$svenv/test-tools" \
        "$svenv/bin/python" -m pytest -q -p no:cacheprovider tests/api >> "$log" 2>&1
}

"$PY" -m pytest -q -p no:cacheprovider tests/integration > "$out/slow.txt" 2>&1 &
slow=$!
# (each tier's header below says when it ended, in seconds from the start: what it takes beside the others)
(
    "$PY" -m pytest -q -p no:cacheprovider -rs tests/container
    rc=$?
    echo "$SECONDS" > "$out/container.s"
    exit "$rc"
) > "$out/container.txt" 2>&1 &
container=$!
"$PY" -m pytest -q -p no:cacheprovider tests/unit tests/api tests/ops tests/browser > "$out/fast.txt" 2>&1
fast_rc=$?
versions_rc=0
for version in $TEST_PYTHONS; do
    api_on "$version" || { [ "$versions_rc" -ne 0 ] || versions_rc=1; }
done
echo "$SECONDS" > "$out/fast.s"
wait "$slow"
slow_rc=$?
echo "$SECONDS" > "$out/slow.s"
wait "$container"
container_rc=$?
for tier in fast slow container; do
    case $tier in
        fast) name="unit, api, ops, browser; then the API on ${TEST_PYTHONS:-no other Python}" ;;
        slow) name=integration ;;
        container) name=container ;;
    esac
    ended=$(cat "$out/$tier.s" 2>/dev/null || echo "?")
    echo "=== tests: $name (ended at ${ended} s) ==="
    cat "$out/$tier.txt"
done
logs=("$out/fast.txt" "$out/slow.txt" "$out/container.txt")
for version in $TEST_PYTHONS; do
    echo "=== tests: api on Python $version ==="
    cat "$out/py$version.txt"
    logs+=("$out/py$version.txt")
done
total() {  # the sum of "<n> $1" over every run's closing lines
    for log in "${logs[@]}"; do tail -n 3 "$log"; done | grep -Eo "[0-9]+ $1" | awk '{ s += $1 } END { print s + 0 }'
}
passed=$(total passed)
failed=$(( $(total failed) + $(total error) ))  # collection errors count as failures
skipped=$(total skipped)
echo "$passed passed, $failed failed, $skipped skipped in $((SECONDS / 60)) min $((SECONDS % 60)) s"
[ "$fast_rc" -ne 0 ] && exit "$fast_rc"
[ "$slow_rc" -ne 0 ] && exit "$slow_rc"
[ "$container_rc" -ne 0 ] && exit "$container_rc"
exit "$versions_rc"
