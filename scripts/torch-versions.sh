#!/usr/bin/env bash
# Record examples/mlp_batchnorm.py under several torch versions and check each result: `record`
# exits 0, `memtrack summary` reads the file, and that torch's own MemoryTracker().load() loads
# it with the same op count. The agent uses torch internals; this is how the supported range in
# python/memtrack/_memtrack_agent/versions.py (docs/record.md, "Torch versions") is checked.
#
#   scripts/torch-versions.sh                 the oldest and newest supported (versions.py)
#   scripts/torch-versions.sh 2.5 2.11.0      these versions (2.5 = the newest 2.5.x)
#   scripts/torch-versions.sh ~/venv/bin/python   a Python that already has torch
#
# Each version gets a venv in $TORCH_VERSIONS_DIR (default ~/.cache/memtrack/torch-versions),
# kept for the next run: CPU wheels from download.pytorch.org (about 200 MB each), else PyPI's
# (with CUDA: about 5 GB each). Exits 1 when a version fails, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
versions_py=python/memtrack/_memtrack_agent/versions.py
if [ $# -eq 0 ]; then
    oldest=$(sed -n 's/^OLDEST = (\([0-9]*\), \([0-9]*\))$/\1.\2/p' "$versions_py")
    newest=$(sed -n 's/^NEWEST = (\([0-9]*\), \([0-9]*\))$/\1.\2/p' "$versions_py")
    set -- "$oldest" "$newest"
fi
dir="${TORCH_VERSIONS_DIR:-$HOME/.cache/memtrack/torch-versions}"
echo "== building memtrack (cargo build)" >&2
cargo build --quiet
memtrack="$PWD/target/debug/memtrack"

python_for() { # VERSION -> a python with that torch (made the first time)
    local v="$1" venv="$dir/torch-$1" spec
    case "$v" in
        *.*.*) spec="torch==$v" ;;
        *) spec="torch==$v.*" ;;
    esac
    if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
        echo "== torch $v: making $venv" >&2
        mkdir -p "$dir"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --progress-bar on --upgrade pip >&2
        if python3 -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/', timeout=20)" 2>/dev/null; then
            "$venv/bin/python" -m pip install --progress-bar on "$spec" numpy \
                --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple >&2
        else
            echo "== download.pytorch.org unreachable: PyPI's wheel, with CUDA (about 5 GB)" >&2
            "$venv/bin/python" -m pip install --progress-bar on "$spec" numpy >&2
        fi
    fi
    echo "$venv/bin/python"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for v in "$@"; do
    if [ -x "$v" ]; then py="$v"; else py=$(python_for "$v") || { failed+=("$v (install)"); continue; }; fi
    found=$("$py" -c "import torch; print(torch.__version__)")
    out="$work/mlp-$found.pkl"
    echo "== torch $found: record, summary, MemoryTracker.load" >&2
    if ! "$memtrack" record --backend cpu -o "$out" -- "$py" examples/mlp_batchnorm.py --steps 2; then
        failed+=("$found (record)"); continue
    fi
    ops=$("$memtrack" export "$out" | "$py" -c "import json, sys; print(json.load(sys.stdin)['op_index'])") ||
        { failed+=("$found (summary/export)"); continue; }
    "$memtrack" summary "$out" --top 3 >"$work/summary.txt" || { failed+=("$found (summary)"); continue; }
    head -1 "$work/summary.txt"
    if ! "$py" - "$out" "$ops" <<'EOF'
import sys
from torch.distributed._tools.memory_tracker import MemoryTracker

t = MemoryTracker()
t.load(sys.argv[1])
n = len(t.memories_allocated)
assert n == int(sys.argv[2]) and n > 0, f"MemoryTracker.load: {n} ops, memtrack: {sys.argv[2]}"
print(f"MemoryTracker.load: {n} ops, as memtrack reads")
EOF
    then
        failed+=("$found (MemoryTracker.load)"); continue
    fi
    echo "== torch $found: ok" >&2
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "torch-versions: failed: ${failed[*]}" >&2
    exit 1
fi
echo "torch-versions: every version recorded and read back: $*" >&2
