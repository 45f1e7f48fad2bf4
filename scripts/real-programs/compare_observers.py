"""Compare two recordings of one program, one per observer (run.sh with COMPARE_OBSERVERS=1):
op counts, the first op whose name or allocated bytes differ, and whether the peak and the
module tables are equal. Prints one line; exits 1 when the peaks or module tables differ
(op names may: docs/record.md, "Observers", says where).

    python compare_observers.py MEMTRACK PYTHON_OBSERVER.pkl COMPILED_OBSERVER.pkl
"""

import json
import subprocess
import sys


def load(memtrack, path):
    out = subprocess.run([memtrack, "export", path], capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    ops = [(o["name"], o["allocated_bytes"]) for o in j["ops"]]
    return ops, j["memtrack"]["peak"], j["memtrack"]["modules"]


def main():
    memtrack, by_mode, compiled = sys.argv[1:4]
    a, peak_a, mods_a = load(memtrack, by_mode)
    b, peak_b, mods_b = load(memtrack, compiled)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    where = "none" if first is None else f"op {first}: {a[first:first + 1]} / {b[first:first + 1]}"
    same = peak_a == peak_b and mods_a == mods_b
    print(
        f"observers: {len(a)} ops (python) / {len(b)} (compiled), first difference {where}; "
        f"peak {'equal' if peak_a == peak_b else 'DIFFERS'}, "
        f"module tables {'equal' if mods_a == mods_b else 'DIFFER'}"
    )
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
