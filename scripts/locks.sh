#!/usr/bin/env bash
# Re-resolve the serve-only locks from requirements-serve.in, hash-pinned, with every version held to
# requirements.lock's (uv reads PyPI's hashes; nothing is installed). `make locks` runs this.
#
# One lock per variant and Python: requirements-serve.lock, -serve-gpu.lock and -serve-triton.lock are
# CPython 3.11's (the Dockerfile's); requirements-serve-py312.lock and -py313.lock the CPU gateway's on
# 3.12 and 3.13 (requirements-serve-gpu-py312.lock, -serve-triton-py313.lock, ... the other variants'), beside requirements-test-py312.lock / -py313.lock, the API tests' tools (pytest, the
# OpenAPI validator) on top of them (`make test` installs both and runs tests/api on 3.12 and 3.13).
# Every lock takes wheels only (--only-binary): a version without a wheel for its Python fails here, not
# at install. Where a pin of requirements.lock has no wheel for 3.12 or 3.13, name the package in RELAX
# below: that lock alone resolves it freely (none today: every pin has cp312 and cp313 wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' requirements.lock > "$tmp/constraints.txt"
declare -A runtime=(
    [serve]=onnxruntime
    # onnxruntime's CUDA build, with CUDA and cuDNN from their wheels (no CUDA toolkit in the image)
    [serve-gpu]="onnxruntime-gpu[cuda,cudnn]"
    [serve-triton]="tritonclient[grpc]"
)
# packages whose requirements.lock pin is dropped for one Python's locks (space-separated names)
declare -A RELAX=([3.12]="" [3.13]="")
TEST_TOOLS=(pytest openapi-spec-validator)
TEST_KEEP=(pyyaml)  # of HUB_ONLY, what the test tools import too (jsonschema-path reads YAML)
# tokenizers requires huggingface-hub, which it never imports to read a tokenizer.json (the gateway's only
# use): the hub client and what only it pulls (~27 MB) stay out, and the serve locks install with --no-deps
HUB_ONLY=(huggingface-hub hf-xet httpx2 httpcore2 truststore fsspec pyyaml filelock)
no_emit=()
for p in "${HUB_ONLY[@]}"; do no_emit+=(--no-emit-package "$p"); done
test_no_emit=()
for p in "${HUB_ONLY[@]}"; do
    [[ " ${TEST_KEEP[*]} " == *" $p "* ]] || test_no_emit+=(--no-emit-package "$p")
done

# resolve $1 (a requirements .in, named $3 in the via-comments) for Python $2 into stdout, hash-pinned,
# wheels only, leaving out the packages of $4 (an array's name; default: no_emit)
compile() {
    local constraints="$tmp/constraints.txt"
    local -n skip=${4:-no_emit}
    if [ -n "${RELAX[$2]:-}" ]; then
        constraints="$tmp/constraints-$2.txt"
        grep -v -i -E "^($(echo "${RELAX[$2]}" | tr ' ' '|'))==" "$tmp/constraints.txt" > "$constraints"
    fi
    "$UV" pip compile "$1" -c "$constraints" --python-version "$2" "${skip[@]}" \
        --python-platform x86_64-manylinux_2_28 --only-binary :all: --generate-hashes --no-header \
        2>/dev/null | sed -e "s|$constraints|requirements.lock|" -e "s|$1|${3:-requirements-serve.in}|"
}

# the packages (with their hashes and via-comments) of $2, a compile output, that the lock $1 does not pin
only_new() {
    awk 'NR == FNR { if (match($0, /^[A-Za-z0-9][^= ]*==/)) have[tolower(substr($0, 1, RLENGTH - 2))] = 1; next }
         /^[A-Za-z0-9]/ { split($0, a, "=="); keep = !(tolower(a[1]) in have) }
         keep' "$1" "$2"
}

header() {  # $1: lock, $2: Python, $3: what it holds (optional)
    if [ -z "${3:-}" ]; then
        echo "# requirements-serve.in resolved by scripts/locks.sh (make locks) for CPython $2 on x86_64 Linux;"
    else
        echo "# requirements-serve.in resolved by scripts/locks.sh (make locks) for CPython $2 on x86_64 Linux,"
        echo "# $3;"
    fi
    echo "# install with: pip install --no-deps --require-hashes -r $1 (complete but for the hub client"
    echo "# tokenizers never imports: ${HUB_ONLY[*]})"
}

for variant in serve serve-gpu serve-triton; do
    { cat requirements-serve.in; echo "${runtime[$variant]}"; } > "$tmp/$variant.in"
    out=requirements-$variant.lock
    { header "$out" 3.11; compile "$tmp/$variant.in" 3.11; cat requirements-models.lock; } > "$out"
done

for version in 3.12 3.13; do
    tag=py${version/./}
    out=requirements-serve-$tag.lock
    { header "$out" "$version" "the CPU gateway (the serve variant)"
        compile "$tmp/serve.in" "$version"; cat requirements-models.lock; } > "$out"
    { cat "$tmp/serve.in"; printf '%s\n' "${TEST_TOOLS[@]}"; } > "$tmp/test.in"
    compile "$tmp/test.in" "$version" "requirements-serve.in + ${TEST_TOOLS[*]}" test_no_emit > "$tmp/test-$tag.txt"
    test_out=requirements-test-$tag.lock
    {
        echo "# The API tests' tools (${TEST_TOOLS[*]}) for CPython $version on x86_64 Linux, on top of $out"
        echo "# (resolved with it by scripts/locks.sh, make locks): pip install --no-deps --require-hashes -r $test_out"
        only_new "$out" "$tmp/test-$tag.txt"
    } > "$test_out"
    # the GPU and Triton variants on this Python (a GPU host's Python is often 3.12: NVIDIA's images)
    for variant in serve-gpu serve-triton; do
        out=requirements-$variant-$tag.lock
        { header "$out" "$version" "the $variant variant"
            compile "$tmp/$variant.in" "$version"; cat requirements-models.lock; } > "$out"
    done
done
