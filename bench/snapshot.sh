#!/usr/bin/env bash
# Speed and memory of the snapshot commands against PyTorch's own _memory_viz, on one synthetic
# snapshot of N trace events (default 1,000,000, about 90 MB).
#
#   bench/snapshot.sh [EVENTS]        run from anywhere; data goes to bench/data/ (gitignored)
#
# Env: PYTHON (for gen_data.py; default python3), TORCH_PYTHON (an interpreter with torch;
# default ~/.cache/memtrack/venv/bin/python, skipped when it cannot import torch),
# SKIP_MEMVIZ=1 to skip the (slow) _memory_viz timing.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-1000000}"
PYTHON="${PYTHON:-python3}"
TORCH_PYTHON="${TORCH_PYTHON:-$HOME/.cache/memtrack/venv/bin/python}"
DATA="bench/data/snapshot_${EVENTS}.pickle"
mkdir -p bench/data
if [ ! -f "$DATA" ]; then
    echo "generating $DATA ($EVENTS events) ..." >&2
    "$PYTHON" ../shared/bench/gen_data.py snapshot "$DATA" --events "$EVENTS"
fi
cargo build --release --quiet
BIN=target/release/memtrack
printf '%s: %s bytes\n' "$DATA" "$(stat -c %s "$DATA")"

# prints "seconds max_rss_kib" of one run of the command, its output discarded
measure() {
    local t
    t=$(mktemp)
    /usr/bin/time -o "$t" -f '%e %M' "$@" > /dev/null 2> /dev/null
    tail -1 "$t"
    rm -f "$t"
}

declare -A SECS RSS
for cmd in summary segments trace top; do
    read -r s m < <(measure "$BIN" "$cmd" "$DATA")
    SECS[$cmd]=$s; RSS[$cmd]=$m
    printf '%-28s %7.2f s  %8.1f MB peak RSS\n' "memtrack $cmd" "$s" "$(echo "$m / 1024" | bc -l)"
done
read -r s m < <(measure "$BIN" plot "$DATA" -o bench/data/timeline.svg)
printf '%-28s %7.2f s  %8.1f MB peak RSS\n' "memtrack plot" "$s" "$(echo "$m / 1024" | bc -l)"

if [ "${SKIP_MEMVIZ:-0}" != 1 ] && "$TORCH_PYTHON" -c 'import torch' 2>/dev/null; then
    read -r s m < <(measure "$TORCH_PYTHON" -m torch.cuda._memory_viz stats "$DATA")
    printf '%-28s %7.2f s  %8.1f MB peak RSS\n' "_memory_viz stats" "$s" "$(echo "$m / 1024" | bc -l)"
    for cmd in summary segments; do
        printf 'ratio _memory_viz stats / memtrack %-9s %6.1fx\n' "$cmd" "$(echo "$s / ${SECS[$cmd]}" | bc -l)"
    done
else
    echo "_memory_viz stats: skipped (no torch at $TORCH_PYTHON, or SKIP_MEMVIZ=1)"
fi
