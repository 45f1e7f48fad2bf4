#!/usr/bin/env bash
# Replay speed of `memtrack simulate` on one synthetic snapshot of N trace iterations
# (gen_data.py; default 1,000,000, about 1.5M trace events, 270 MB).
#
#   bench/simulate.sh [EVENTS]        run from anywhere; data goes to bench/data/ (gitignored)
#
# No PyTorch tool replays a trace (that is what simulate adds), so the reference beside it is
# `memtrack summary`, which reads the same parts of the file (events without stacks) and makes
# one pass over them: simulate's time beyond it is the replay. The synthetic trace does not
# follow the allocator's rules (its validation reports differences; real captures match): it
# measures speed only. Env: PYTHON (default python3), RUNS (default 3; the fastest counts).
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-1000000}"
PYTHON="${PYTHON:-python3}"
DATA="bench/data/snapshot_${EVENTS}.pickle"
mkdir -p bench/data
if [ ! -f "$DATA" ]; then
    echo "generating $DATA ($EVENTS events) ..." >&2
    "$PYTHON" ../shared/bench/gen_data.py snapshot "$DATA" --events "$EVENTS"
fi
cargo build --release --quiet
BIN=target/release/memtrack
RUNS="${RUNS:-3}"
# prints the fastest wall time of RUNS runs, the least CPU time (user + sys: on a shared
# machine the steadier measure), and the largest peak RSS in MB
best() {
    local t w u s m c bw="" bc="" bm=0
    t=$(mktemp)
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -o "$t" -f '%e %U %S %M' "$@" > /dev/null 2> /dev/null
        read -r w u s m < <(tail -1 "$t")
        c=$(echo "$u + $s" | bc -l)
        if [ -z "$bw" ] || [ "$(echo "$w < $bw" | bc -l)" = 1 ]; then bw=$w; fi
        if [ -z "$bc" ] || [ "$(echo "$c < $bc" | bc -l)" = 1 ]; then bc=$c; fi
        if [ "$m" -gt "$bm" ]; then bm=$m; fi
    done
    rm -f "$t"
    echo "$bw $bc $((bm / 1024))"
}
N=$("$BIN" summary "$DATA" --format json | "$PYTHON" -c 'import json,sys; print(sum(d["trace_entries"] for d in json.load(sys.stdin)["devices"]))')
read -r tr cr mr < <(best "$BIN" summary "$DATA")
read -r t1 c1 m1 < <(best "$BIN" simulate "$DATA")
read -r t4 c4 m4 < <(best "$BIN" simulate "$DATA" --set expandable_segments:True --set max_split_size_mb:128 --set roundup_power2_divisions:4)
printf '%s: %s trace events\n' "$DATA" "$N"
printf '%-36s %6.2f s wall %6.2f s cpu %6d MB\n' "memtrack summary (read + one pass)" "$tr" "$cr" "$mr"
printf '%-36s %6.2f s wall %6.2f s cpu %6d MB\n' "memtrack simulate (1 scenario)" "$t1" "$c1" "$m1"
printf '%-36s %6.2f s wall %6.2f s cpu %6d MB\n' "memtrack simulate (4 scenarios)" "$t4" "$c4" "$m4"
"$PYTHON" - "$N" "$c1" "$c4" "$cr" <<'PY'
import sys
n, c1, c4, cr = int(sys.argv[1]), *map(float, sys.argv[2:])
per = (c4 - c1) / 3  # CPU time of one more scenario: its replay alone
rate = n / per if per > 0 else float("inf")
print(f"replay: {rate / 1e6:.1f}M events/s per scenario (CPU time of the 3 extra scenarios); "
      f"first scenario with validation and limit passes: {(c1 - cr):.2f} s cpu beyond summary; "
      f"floor 2M events/s: {'met' if rate >= 2e6 else 'MISSED'}")
PY
