#!/usr/bin/env bash
# memtrack's main job on a bundled example, on the CPU: record examples/mlp_batchnorm.py, then
# summary and plot. Installs what it needs (a Python venv with torch: scripts/setup-python.sh,
# which says its size) and says what each step is doing; ends with commands to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
step() { printf '\n== demo step %s\n' "$*" >&2; }
step "1/4: Python with PyTorch (scripts/setup-python.sh)"
py="$(scripts/setup-python.sh)"
echo "using $py" >&2
# installed (into ~/.cargo/bin, on PATH with rustup) so the README's next commands work as
# written; the build is the repo's own target/ folder, not a second one
step "2/4: building and installing memtrack (cargo install; a few minutes the first time)"
cargo install --path . --locked --target-dir target
memtrack="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin/memtrack"
mkdir -p demo
step "3/4: recording examples/mlp_batchnorm.py on the CPU -> demo/mlp.pkl"
"$memtrack" record -o demo/mlp.pkl -- "$py" examples/mlp_batchnorm.py
step "4/4: its summary, and its plot -> demo/mlp.svg"
"$memtrack" summary demo/mlp.pkl --top 10
"$memtrack" plot demo/mlp.pkl -o demo/mlp.svg
on_path=memtrack
if [ "$(command -v memtrack || true)" != "$memtrack" ]; then
    echo "memtrack: installed as $memtrack; put ${memtrack%/memtrack} first on your PATH for the README's commands" >&2
    on_path="$memtrack"
fi
cat >&2 <<NEXT

== next, try (README.md has more):
  $on_path modules demo/mlp.pkl                     what each module holds, by category
  $on_path plot demo/mlp.pkl --split -o demo/mlp.png   one panel per series
  $on_path summary fixtures/snapshots/h100/oom_default.pickle   an allocator snapshot with an OOM
  $on_path top fixtures/snapshots/h100/oom_default.pickle --at oom   what was live at the OOM
  $on_path record -o run.pkl -- $py your_train.py   your own program
NEXT
