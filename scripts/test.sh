#!/usr/bin/env bash
# Run every test, as CI does: installs what it needs first (Rust crates through cargo, a
# Python venv with torch through scripts/setup-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
MEMTRACK_PYTHON="$(scripts/setup-python.sh)"
export MEMTRACK_PYTHON
cargo test --locked "$@"
