#!/usr/bin/env bash
# Fuzz the readers: scripts/fuzz.sh [SECONDS] [TARGET] (default 300 s, pickle_reader).
# pickle_reader's corpus starts from every pickle fixture, among them files that expand
# through shared references (fixtures/pickle/laughs_*); profiler_trace's from the traces of
# fixtures/profiler and fuzz/seeds/profiler_trace (values cut across chunks, hostile
# sizes). Needs cargo-fuzz (`cargo install cargo-fuzz`); RUSTC_BOOTSTRAP
# lets the stable toolchain build the sanitizer instrumentation. New inputs go to
# fuzz/corpus; crashes to fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
limits=(-max_total_time="${1:-300}" -max_len=65536 -timeout=10 -rss_limit_mb=2048)
case "${2:-pickle_reader}" in
pickle_reader)
    mkdir -p corpus
    exec cargo fuzz run pickle_reader corpus ../fixtures/tracker ../fixtures/pickle ../fixtures/snapshots -- "${limits[@]}"
    ;;
profiler_trace)
    mkdir -p corpus_profiler_trace
    exec cargo fuzz run profiler_trace corpus_profiler_trace ../fixtures/profiler seeds/profiler_trace -- "${limits[@]}"
    ;;
*)
    echo "unknown target: $2 (pickle_reader or profiler_trace)" >&2
    exit 2
    ;;
esac
