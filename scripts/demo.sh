#!/usr/bin/env bash
# memtrack's main job on a bundled example, on the CPU: record examples/mlp_batchnorm.py, then
# summary and plot. Uses the `memtrack` and the Python with torch that are already there and
# says which; installs only what is missing (memtrack with `cargo install`, showing cargo's
# progress; a venv with torch through scripts/setup-python.sh, which says its size and asks
# first), saying what each step is doing; ends with commands to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== demo step %s\n' "$*" >&2; }

step "1/4: a Python with PyTorch"
# the one the tests use too (scripts/setup-python.sh): $MEMTRACK_PYTHON, the active
# environment's `python`, `python3`, the first that imports torch; only when none does, a venv
# with PyPI's torch, made after asking (MEMTRACK_YES=1 answers for you)
py="$(scripts/setup-python.sh)"

step "2/4: the memtrack command"
# one already on PATH (`pip install .` puts it in the environment's bin/, `cargo install` in
# ~/.cargo/bin) is used as it is; only without one is it built and installed
memtrack="$(command -v memtrack || true)"
if [ -n "$memtrack" ]; then
    echo "using $memtrack ($("$memtrack" --version)), already on PATH" >&2
else
    command -v cargo >/dev/null || { echo "memtrack: no memtrack on PATH and cargo not found: pip install . (in the environment of your PyTorch program), or install Rust (https://rustup.rs)" >&2; exit 2; }
    echo "no memtrack on PATH: building and installing it (cargo install into ~/.cargo/bin, cargo's lines below; the first time about 5 minutes on 2 idle cores, 14 measured on a busy 2-core machine; 295 MB of build files in target/)" >&2
    # the build is the repo's own target/ folder, not a second one
    cargo install --path . --locked --target-dir target
    memtrack="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin/memtrack"
fi

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
