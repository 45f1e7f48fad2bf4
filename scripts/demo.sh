#!/usr/bin/env bash
# memtrack's main job on a bundled example, on the CPU: record examples/mlp_batchnorm.py, then
# summary and plot. Installs what it needs (a Python venv with torch: scripts/setup-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
py="$(scripts/setup-python.sh)"
# installed (into ~/.cargo/bin, on PATH with rustup) so the README's next commands work as
# written; the build is the repo's own target/ folder, not a second one
cargo install --path . --locked --quiet --target-dir target
memtrack="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin/memtrack"
mkdir -p demo
"$memtrack" record -o demo/mlp.pkl -- "$py" examples/mlp_batchnorm.py
"$memtrack" summary demo/mlp.pkl --top 10
"$memtrack" plot demo/mlp.pkl -o demo/mlp.svg
if [ "$(command -v memtrack || true)" != "$memtrack" ]; then
  echo "memtrack: installed as $memtrack; put ${memtrack%/memtrack} first on your PATH for the README's commands" >&2
fi
