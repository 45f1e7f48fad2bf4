#!/usr/bin/env bash
# Run two memtrack binaries over every fixture with every reading command and its variants,
# and report any difference in stdout, stderr, exit code or written file. A refactor that
# changes no behaviour shows none:
#
#   git worktree add /tmp/base HEAD~5 && (cd /tmp/base && cargo build --release)
#   cargo build --release && scripts/output-parity.sh /tmp/base/target/release/memtrack target/release/memtrack
#
# Exit 0 when every output is the same, 1 when one differs (the differing files are listed).
# KEEP=DIR keeps both trees of outputs there.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_MEMTRACK NEW_MEMTRACK" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$(realpath "$1")"
new="$(realpath "$2")"
work="${KEEP:-$(mktemp -d)}"
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

snapshots=$(cd "$root" && find fixtures/snapshots -name '*.pickle' | sort)
stats=$(cd "$root" && ls fixtures/tracker/*.pkl fixtures/record/*.pkl)
records=$(cd "$root" && ls fixtures/record/*.pkl | tr '\n' ' ')
bad=$(cd "$root" && ls fixtures/pickle/*.pkl)

# One case a line: a name (the folder its outputs go to) and the arguments, `|`-separated;
# paths are relative to the repository root, outputs written with `-o` land in the case folder.
cases() {
    for f in $snapshots; do
        n=${f//\//_}
        for fmt in text json csv markdown; do
            echo "$n.summary.$fmt|summary $f --format $fmt"
            echo "$n.segments.$fmt|segments $f --format $fmt"
            echo "$n.top.$fmt|top $f --format $fmt"
            echo "$n.trace.$fmt|trace $f --format $fmt"
        done
        echo "$n.summary.top3.units|summary $f --top 3 --units KiB"
        echo "$n.summary.device1|summary $f --device 1"
        echo "$n.segments.svg|segments $f -o OUT/seg.svg"
        echo "$n.plot.svg|plot $f -o OUT/plot.svg"
        echo "$n.plot.device0|plot $f --device 0 -o OUT/plot.svg"
        echo "$n.plot.stacked.svg|plot $f --stacked -o OUT/stacked.svg"
        echo "$n.plot.stacked.html|plot $f --stacked -o OUT/stacked.html"
        echo "$n.plot.stacked.site|plot $f --stacked --by site --bands 5 --x time -o OUT/stacked.svg"
        echo "$n.top.by.end|top $f --by end"
        echo "$n.top.at.peak|top $f --at peak --top 5"
        echo "$n.top.folded|top $f --folded"
        echo "$n.top.folded.peak|top $f --folded --at peak"
        echo "$n.trace.device1|trace $f --device 1"
        echo "$n.export|export $f"
        echo "$n.simulate|simulate $f"
        echo "$n.simulate.set|simulate $f --set expandable_segments:True --set max_split_size_mb:64,roundup_power2_divisions:4"
        for fmt in json csv markdown; do
            echo "$n.simulate.$fmt|simulate $f --format $fmt --set expandable_segments:True"
            echo "$n.segments.units.$fmt|segments $f --format $fmt --units MiB"
            echo "$n.top.peak.$fmt|top $f --format $fmt --at peak --top 4"
        done
    done
    for f in $stats; do
        n=${f//\//_}
        for fmt in text json csv markdown; do
            echo "$n.summary.$fmt|summary $f --format $fmt"
            echo "$n.modules.$fmt|modules $f --format $fmt"
        done
        echo "$n.summary.top5|summary $f --top 5 --units MiB"
        echo "$n.modules.depth|modules $f --depth 2 --iteration all --units KiB"
        echo "$n.modules.state|modules $f --state pre-forward,peak-backward --iteration 1"
        echo "$n.plot.svg|plot $f -o OUT/plot.svg"
        echo "$n.plot.split|plot $f --split --series allocated,reserved --units MiB --title T -o OUT/plot.svg"
        echo "$n.plot.png|plot $f -o OUT/plot.png"
        echo "$n.export|export $f"
        echo "$n.allocator|allocator $f"
        echo "$n.allocator.oom|allocator $f --at oom"
        for fmt in json csv markdown; do
            echo "$n.allocator.$fmt|allocator $f --format $fmt"
        done
        echo "$n.cycles|cycles $f"
        echo "$n.segments|segments $f"
    done
    for fmt in text json csv markdown; do
        echo "records.summary.$fmt|summary $records --format $fmt"
        echo "records.diff.$fmt|diff $records --format $fmt --fail-over 1MiB"
    done
    set -- $snapshots
    while [ $# -ge 2 ]; do
        n="${1//\//_}.vs.${2//\//_}"
        for fmt in text json csv markdown; do
            echo "$n.diff.$fmt|diff $1 $2 --format $fmt"
        done
        echo "$n.diff.fail|diff $1 $2 --fail-over 5% --top 3"
        shift
    done
    set -- $stats
    while [ $# -ge 2 ]; do
        n="${1//\//_}.vs.${2//\//_}"
        echo "$n.diff|diff $1 $2"
        echo "$n.diff.json|diff $1 $2 --format json --fail-over 1MiB"
        shift
    done
    for f in $bad; do
        n=${f//\//_}
        echo "$n.summary|summary $f"
        echo "$n.top|top $f"
        echo "$n.export|export $f"
    done
    echo "missing.summary|summary fixtures/no-such-file.pkl"
    echo "help|--help"
    for c in summary plot export segments top trace diff record modules gpus allocator cycles simulate completions man; do
        echo "help.$c|$c --help"
    done
    echo "man|man"
    echo "completions.bash|completions bash"
}

run_tree() { # BINARY OUTDIR
    local bin="$1" out="$2"
    mkdir -p "$out"
    cases | while IFS='|' read -r name args; do
        local dir="$out/$name"
        mkdir -p "$dir"
        # shellcheck disable=SC2086
        (cd "$root" && "$bin" ${args//OUT/$dir} >"$dir/stdout" 2>"$dir/stderr"; echo $? >"$dir/exit")
        # the output folder's own path differs between the two runs
        sed -i "s#$dir#OUT#g" "$dir/stderr"
    done
}

run_tree "$old" "$work/old"
run_tree "$new" "$work/new"
count=$(cases | wc -l)
if diff -rq "$work/old" "$work/new" >"$work/differences"; then
    echo "output-parity: $count cases, every stdout, stderr, exit code and file the same"
else
    cat "$work/differences"
    echo "output-parity: $(wc -l <"$work/differences") of the outputs of $count cases differ (KEEP=DIR to inspect)"
    exit 1
fi
