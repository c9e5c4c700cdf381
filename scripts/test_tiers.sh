#!/usr/bin/env bash
# `make test`: the test tiers as two pytest processes at once — unit, api, ops and browser beside
# integration (which mostly waits on the servers it starts) — so the waits of one overlap the work of the
# other on two cores (measured: 11 min 17 s against 13 min 09 s in one process, with browser on the
# integration side; it is on the other side since, for balance). Each tier's output is printed whole once both end,
# then one closing line over both; the exit status is the first non-zero of the two.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$PY" -m pytest -q -p no:cacheprovider tests/integration > "$out/slow.txt" 2>&1 &
slow=$!
"$PY" -m pytest -q -p no:cacheprovider tests/unit tests/api tests/ops tests/browser > "$out/fast.txt" 2>&1
fast_rc=$?
wait "$slow"
slow_rc=$?
for tier in fast slow; do
    echo "=== tests: $([ "$tier" = fast ] && echo 'unit, api, ops, browser' || echo 'integration') ==="
    cat "$out/$tier.txt"
done
total() {  # the sum of "<n> $1" over both tiers' closing lines
    tail -n 3 "$out/fast.txt" "$out/slow.txt" | grep -Eo "[0-9]+ $1" | awk '{ s += $1 } END { print s + 0 }'
}
passed=$(total passed)
failed=$(( $(total failed) + $(total error) ))  # collection errors count as failures
skipped=$(total skipped)
echo "$passed passed, $failed failed, $skipped skipped"
[ "$fast_rc" -ne 0 ] && exit "$fast_rc"
exit "$slow_rc"
