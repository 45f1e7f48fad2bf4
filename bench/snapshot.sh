#!/usr/bin/env bash
# Speed and memory of the snapshot commands against PyTorch's own _memory_viz, on one snapshot:
# a real-shaped one of N trace events that gen_data.py writes (default 1,000,000: ~1.58M
# entries, 270 MB; written by bench/gen_big_snapshot.py, byte for byte the same), or any
# snapshot file.
#
#   bench/snapshot.sh [EVENTS | FILE]   run from anywhere; data goes to bench/data/ (gitignored)
#
# Env: PYTHON (for the generator; default python3), TORCH_PYTHON (an interpreter with torch;
# default ~/.cache/memtrack/venv/bin/python, skipped when it cannot import torch),
# SKIP_MEMVIZ=1 to skip the (slow) _memory_viz timing, RUNS / MEMVIZ_RUNS: runs per command
# (default 3 / 2; the fastest is reported).
set -euo pipefail
cd "$(dirname "$0")/.."
ARG="${1:-1000000}"
PYTHON="${PYTHON:-python3}"
TORCH_PYTHON="${TORCH_PYTHON:-$HOME/.cache/memtrack/venv/bin/python}"
mkdir -p bench/data
if [ -f "$ARG" ]; then
    DATA="$ARG"
else
    EVENTS="$ARG"
    DATA="bench/data/snapshot_${EVENTS}.pickle"
fi
if [ ! -f "$DATA" ]; then
    echo "generating $DATA ($EVENTS events) ..." >&2
    # the bytes gen_data.py writes, in bounded memory (gen_data.py needs ~3.3 GB a 4M events)
    "$PYTHON" bench/gen_big_snapshot.py "$DATA" --events "$EVENTS"
fi
cargo build --release --quiet
BIN=target/release/memtrack
BYTES=$(stat -c %s "$DATA")
printf '%s: %s bytes\n' "$DATA" "$BYTES"

# prints "wall_s cpu_s max_rss_kib": the fastest of RUNS runs (default 3) of the command (by
# wall time), its output discarded. The machine may be shared: the fastest run is the least
# disturbed, and CPU time (user + sys) is reported beside wall time.
RUNS="${RUNS:-3}"
measure() {
    local t best="" cpu="" rss=0 w u s m
    t=$(mktemp)
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -o "$t" -f '%e %U %S %M' "$@" > /dev/null 2> /dev/null
        read -r w u s m < <(tail -1 "$t")
        if [ -z "$best" ] || [ "$(echo "$w < $best" | bc -l)" = 1 ]; then
            best=$w
            cpu=$(echo "$u + $s" | bc -l)
        fi
        if [ "$m" -gt "$rss" ]; then rss=$m; fi
    done
    rm -f "$t"
    echo "$best $cpu $rss"
}

report() { # name wall cpu rss_kib
    printf '%-22s %7.2f s wall %7.2f s cpu %8.1f MB peak RSS\n' "$1" "$2" "$3" "$(echo "$4 / 1024" | bc -l)"
}

report_gb() { # name wall cpu rss_kib: also seconds per GB of file
    report "$1" "$2" "$3" "$4"
    printf '%-22s %7.2f s/GB wall %7.2f s/GB cpu\n' "" \
        "$(echo "$2 * 1000000000 / $BYTES" | bc -l)" "$(echo "$3 * 1000000000 / $BYTES" | bc -l)"
}

declare -A WALL CPU
run() { # name, then the command
    local name=$1 w c m
    shift
    read -r w c m < <(measure "$@")
    WALL[$name]=$w; CPU[$name]=$c
    report_gb "memtrack $name" "$w" "$c" "$m"
}
for cmd in summary segments trace top; do
    run "$cmd" "$BIN" "$cmd" "$DATA"
done
run "top --folded" "$BIN" top --folded "$DATA"
run "plot" "$BIN" plot "$DATA" -o bench/data/timeline.svg
run "diff (itself)" "$BIN" diff "$DATA" "$DATA"
run "plot --stacked" "$BIN" plot "$DATA" --stacked -o bench/data/stacked.html
run "export" "$BIN" export "$DATA" -o bench/data/export.json
rm -f bench/data/export.json
printf 'memtrack plot --stacked -o .html: %s bytes, self-contained\n' "$(stat -c %s bench/data/stacked.html)"

if [ "${SKIP_MEMVIZ:-0}" != 1 ] && "$TORCH_PYTHON" -c 'import torch' 2>/dev/null; then
    read -r w c m < <(RUNS="${MEMVIZ_RUNS:-2}" measure "$TORCH_PYTHON" -m torch.cuda._memory_viz stats "$DATA")
    report "_memory_viz stats" "$w" "$c" "$m"
    for cmd in summary segments; do
        printf '_memory_viz stats / memtrack %-8s %6.1fx wall %6.1fx cpu\n' "$cmd" \
            "$(echo "$w / ${WALL[$cmd]}" | bc -l)" "$(echo "$c / ${CPU[$cmd]}" | bc -l)"
    done
    # the page pytorch.org/memory_viz draws: the whole snapshot inside, base64, and its
    # script from cdn.jsdelivr.net (it does not open offline)
    read -r w c m < <(RUNS=1 measure "$TORCH_PYTHON" -m torch.cuda._memory_viz trace_plot "$DATA" -o bench/data/memviz_trace.html)
    report "_memory_viz trace_plot" "$w" "$c" "$m"
    ours=$(stat -c %s bench/data/stacked.html)
    theirs=$(stat -c %s bench/data/memviz_trace.html)
    printf '_memory_viz trace_plot / memtrack plot --stacked: %6.1fx wall, HTML %s / %s bytes = %.0fx\n' \
        "$(echo "$w / ${WALL["plot --stacked"]}" | bc -l)" "$theirs" "$ours" "$(echo "$theirs / $ours" | bc -l)"
else
    echo "_memory_viz stats: skipped (no torch at $TORCH_PYTHON, or SKIP_MEMVIZ=1)"
fi
