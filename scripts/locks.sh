#!/usr/bin/env bash
# Re-resolve the serve-only locks from requirements-serve.in, hash-pinned, with every version held to
# requirements.lock's (uv reads PyPI's hashes; nothing is installed). `make locks` runs this.
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
# tokenizers requires huggingface-hub, which it never imports to read a tokenizer.json (the gateway's only
# use): the hub client and what only it pulls (~27 MB) stay out, and the serve locks install with --no-deps
HUB_ONLY=(huggingface-hub hf-xet httpx2 httpcore2 truststore fsspec pyyaml filelock)
no_emit=()
for p in "${HUB_ONLY[@]}"; do no_emit+=(--no-emit-package "$p"); done
for variant in serve serve-gpu serve-triton; do
    { cat requirements-serve.in; echo "${runtime[$variant]}"; } > "$tmp/$variant.in"
    out=requirements-$variant.lock
    {
        echo "# requirements-serve.in resolved by scripts/locks.sh (make locks) for CPython 3.11 on x86_64 Linux;"
        echo "# install with: pip install --no-deps --require-hashes -r $out (complete but for the hub client"
        echo "# tokenizers never imports: ${HUB_ONLY[*]})"
        "$UV" pip compile "$tmp/$variant.in" -c "$tmp/constraints.txt" --python-version 3.11 "${no_emit[@]}" \
            --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header 2>/dev/null \
            | sed -e "s|$tmp/constraints.txt|requirements.lock|" -e "s|$tmp/$variant.in|requirements-serve.in|"
        cat requirements-models.lock
    } > "$out"
done
