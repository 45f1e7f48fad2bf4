#!/usr/bin/env bash
# memtrack's main job on a bundled example, on the CPU: record examples/mlp_batchnorm.py, then
# summary and plot. Installs what it needs (a Python venv with torch: scripts/setup-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
py="$(scripts/setup-python.sh)"
cargo build --release --locked --quiet
mkdir -p demo
./target/release/memtrack record -o demo/mlp.pkl -- "$py" examples/mlp_batchnorm.py
./target/release/memtrack summary demo/mlp.pkl --top 10
./target/release/memtrack plot demo/mlp.pkl -o demo/mlp.svg
