#!/usr/bin/env bash
# memtrack's main job on a bundled example: summary and plot of a real MemoryTracker file.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
cargo build --release --locked --quiet
mkdir -p demo
./target/release/memtrack summary fixtures/tracker/synthetic_2000_ops.pkl --top 10
./target/release/memtrack plot fixtures/tracker/synthetic_2000_ops.pkl -o demo/synthetic_2000_ops.svg
