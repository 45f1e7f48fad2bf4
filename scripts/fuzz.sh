#!/usr/bin/env bash
# Fuzz the pickle readers: scripts/fuzz.sh [SECONDS] (default 300). The corpus starts from
# every fixture, among them files that expand through shared references
# (fixtures/pickle/laughs_*). Needs cargo-fuzz (`cargo install cargo-fuzz`); RUSTC_BOOTSTRAP
# lets the stable toolchain build the sanitizer instrumentation. New inputs go to
# fuzz/corpus; crashes to fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
mkdir -p corpus
export RUSTC_BOOTSTRAP=1
exec cargo fuzz run pickle_reader corpus ../fixtures/tracker ../fixtures/pickle ../fixtures/snapshots -- \
    -max_total_time="${1:-300}" -max_len=65536 -timeout=10 -rss_limit_mb=2048
