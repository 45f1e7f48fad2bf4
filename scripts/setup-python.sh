#!/usr/bin/env bash
# Make (or reuse) the Python environment with PyTorch that memtrack's tests, examples and
# benchmarks run: $MEMTRACK_VENV, by default ~/.cache/memtrack/venv. Prints its python on
# stdout; pip's progress goes to stderr, so a first run (a few minutes) is never silent.
# The venv lives outside the checkout so CI runs and fresh clones on one machine can share it;
# nothing depends on it being there already.
set -euo pipefail
venv="${MEMTRACK_VENV:-$HOME/.cache/memtrack/venv}"
py="$venv/bin/python"
# PyPI's torch for Linux carries CUDA: the venv is about 5.5 GB (measured: du -sh, torch 2.15)
size="about 5.5 GB"
if ! "$py" -c "import torch, matplotlib" >/dev/null 2>&1; then
    echo "memtrack: setting up $venv with torch and matplotlib ($size, downloaded the first time only)" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$py" -m pip install --progress-bar on --upgrade pip >&2
    "$py" -m pip install --progress-bar on torch matplotlib numpy >&2
fi
# dask (pure Python, a few MB): tests/many_ranks_recipe.rs runs the documented recipe on it;
# transformers (about 30 MB with its needs): tests/estimate_workflows.rs estimates models built
# from its configs, as users bring them (generate(), its checkpointing, its mask checks)
for pkg in dask transformers; do
    if ! "$py" -c "import $pkg" >/dev/null 2>&1; then
        "$py" -m pip install --progress-bar on "$pkg" >&2
    fi
done
echo "$py"
