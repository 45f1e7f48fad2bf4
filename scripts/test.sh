#!/usr/bin/env bash
# Check formatting and lints (cargo fmt --check, cargo clippy -D warnings), then run every
# test, as CI does: installs what it needs first (Rust crates through cargo; the Python with
# torch the demo uses, or a venv with it, through scripts/setup-python.sh, which asks before
# downloading torch unless MEMTRACK_YES=1 or CI is set), then prints one line of totals.
# The build's files go to target/ (4.4 GB for the lints and the test binaries, see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "memtrack: cargo not found: install Rust (https://rustup.rs)" >&2; exit 2; }
# formatting and lints first: a change that breaks them fails here, before the long tests
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
        rustup component add "$component" >&2
    fi
done
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
MEMTRACK_PYTHON="$(scripts/setup-python.sh --tests)"
export MEMTRACK_PYTHON
# record's default observer on the CPU is built once per torch (about 20 s of compiler time,
# saying so every 15 s): build it now, so
# that no test waits for the build or is stopped in the middle of it
"$MEMTRACK_PYTHON" -c 'import sys, torch; sys.path.insert(0, "python/memtrack")
from _memtrack_agent import native
ext, why = native.load(torch)
ext or print(f"memtrack: the compiled observer cannot be built: {why}", file=sys.stderr)' >&2
# the HTML page of `plot --stacked` is tested in a real headless browser; CI installs one
if [ -n "${CI:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
   && [ -z "${MEMTRACK_BROWSER:-}" ] && command -v apt-get >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "memtrack: installing chromium for the HTML test (apt-get)" >&2
  $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: a failing test binary must not hide the results of the ones after it
cargo test --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -aoE '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -aoE '; [0-9]+ failed' "$log" | awk '{s += $2} END {print s + 0}')
echo "memtrack tests: $passed passed, $failed failed"
exit "$status"
