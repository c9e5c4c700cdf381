#!/usr/bin/env bash
# The path of a CPython interpreter of version $1 (e.g. 3.13) that runs: python3.13 on PATH, else pyenv's
# newest 3.13.x, else /usr/bin or /usr/local/bin; exit 1, printing nothing, when there is none. (A pyenv
# shim on PATH for a version that is not active fails to run, so each candidate is tried.)
set -uo pipefail
version=${1:?usage: find_python.sh MAJOR.MINOR}
want="(${version/./, })"
candidates=("$(command -v "python$version" 2>/dev/null)")
while IFS= read -r found; do candidates+=("$found"); done < <(
    ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".*/bin/"python$version" 2>/dev/null | sort -V -r
)
candidates+=("/usr/bin/python$version" "/usr/local/bin/python$version")
for candidate in "${candidates[@]}"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] \
        && "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != $want)" 2>/dev/null; then
        echo "$candidate"
        exit 0
    fi
done
exit 1
