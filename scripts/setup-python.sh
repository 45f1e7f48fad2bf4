#!/usr/bin/env bash
# The Python with PyTorch that memtrack's demo, tests, examples and benchmarks run, printed on
# stdout (what it says goes to stderr). One choice for all of them, the first that imports
# torch: $MEMTRACK_PYTHON (set, it must), the active environment's `python`, `python3`, then
# the venv $MEMTRACK_VENV (default ~/.cache/memtrack/venv), made the first time.
#
# Making the venv downloads PyPI's torch, which on Linux carries CUDA even where there is no GPU:
# about 5.5 GB once installed (measured: du -sh, torch 2.15). So it asks first when a terminal is
# there; without one it goes ahead only when told to: --yes, MEMTRACK_YES=1, or CI set (what
# .ci/run does). Never a silent download, and CI never waits on a question.
#
# --tests: also the packages some tests need besides torch (matplotlib, Dask, transformers: tens
# of MB),
# installed into the venv as needed; into a Python of your own only with consent (asked on a
# terminal; --yes, MEMTRACK_YES=1); without them, the tests that compare with MemoryTracker's
# plots fail and the Dask recipe's is skipped.
set -euo pipefail
yes="${MEMTRACK_YES:-}"
[ -n "${CI:-}" ] && yes=1
tests=""
for arg in "$@"; do
    case "$arg" in
        --yes) yes=1 ;;
        --tests) tests=1 ;;
        *) echo "setup-python.sh: unknown option $arg (--yes, --tests)" >&2; exit 2 ;;
    esac
done
say() { echo "memtrack: $*" >&2; }
venv="${MEMTRACK_VENV:-$HOME/.cache/memtrack/venv}"
size="about 5.5 GB"

imports() { "$1" -c "import torch" >/dev/null 2>&1; }

py=""
if [ -n "${MEMTRACK_PYTHON:-}" ]; then
    imports "$MEMTRACK_PYTHON" || { say "MEMTRACK_PYTHON=$MEMTRACK_PYTHON does not import torch: point it at a Python that does, or unset it"; exit 2; }
    py="$MEMTRACK_PYTHON"
    say "using $py (MEMTRACK_PYTHON)"
else
    candidates=(python python3 "$venv/bin/python")
    # CI's tests on a fresh machine: the venv, all of whose packages are ours to install
    [ -n "${CI:-}" ] && [ -n "$tests" ] && candidates=("$venv/bin/python")
    for candidate in "${candidates[@]}"; do
        found="$(command -v "$candidate" || true)"
        if [ -n "$found" ] && imports "$found"; then
            py="$found"
            say "using $py (it imports torch; MEMTRACK_PYTHON chooses another)"
            break
        fi
    done
fi

ours=""
if [ -z "$py" ]; then
    py="$venv/bin/python"
    ours=1
    if [ -z "$yes" ]; then
        if [ -t 0 ] && [ -t 2 ]; then
            printf 'memtrack: no Python here imports torch. Make a venv in %s with PyPI'"'"'s torch, matplotlib and numpy (%s to download and install, 5-15 minutes on a fast link)? [y/N] ' "$venv" "$size" >&2
            read -r answer
            case "$answer" in [yY]*) ;; *) say "nothing installed. Set MEMTRACK_PYTHON to a Python that has torch, or run again and answer y"; exit 2 ;; esac
        else
            say "no Python here imports torch, and making one downloads $size: set MEMTRACK_PYTHON to a Python that has torch, or allow the download with MEMTRACK_YES=1 (or --yes)"
            exit 2
        fi
    fi
    if ! imports "$py"; then
        say "setting up $venv with torch, matplotlib and numpy ($size, downloaded the first time only; pip shows its progress)"
        mkdir -p "$(dirname "$venv")"
        python3 -m venv "$venv"
        "$py" -m pip install --progress-bar on --upgrade pip >&2
        "$py" -m pip install --progress-bar on torch matplotlib numpy >&2
    fi
fi

if [ -n "$tests" ]; then
    # dask (pure Python, a few MB): tests/many_ranks_recipe.rs runs the documented recipe on it;
    # matplotlib: the tests that check memtrack against MemoryTracker's own plots;
    # transformers (about 30 MB with its needs): tests/estimate_workflows.rs estimates models
    # built from its configs, as users bring them (generate(), its checkpointing, its masks)
    missing=""
    for module in matplotlib dask transformers; do
        "$py" -c "import $module" >/dev/null 2>&1 || missing="$missing $module"
    done
    if [ -n "$missing" ]; then
        if [ -z "$ours" ] && [ -z "$yes" ] && [ -t 0 ] && [ -t 2 ]; then
            printf 'memtrack: %s lacks%s, which some tests need: pip install them there (tens of MB)? [y/N] ' "$py" "$missing" >&2
            read -r answer
            case "$answer" in [yY]*) yes=1 ;; esac
        fi
        if [ -n "$ours" ] || [ -n "$yes" ]; then
            say "installing$missing into $py for the tests"
            "$py" -m pip install --progress-bar on $missing >&2 ||
                say "pip could not install$missing into $py: the tests that need them are skipped"
        else
            say "$py lacks$missing: the tests that compare with MemoryTracker's plots fail without matplotlib, the Dask recipe's and the estimate's of Hugging Face models are skipped (MEMTRACK_YES=1 installs them there)"
        fi
    fi
fi
echo "$py"
