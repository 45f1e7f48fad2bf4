#!/usr/bin/env python3
"""memtrack vs PyTorch's MemoryTracker on the same 1M-op stats file (issue 2's floors).

    python3 bench/tracker.py [--ops N] [--repeat R]

Needs a release build (cargo build --release) and a Python with torch + matplotlib
(MEMTRACK_PYTHON, default: what scripts/setup-python.sh makes). Writes its input with
../shared/bench/gen_data.py into bench/data/ if it is not there yet.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from run_timed import report, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY_SUMMARY = (
    "import sys, io, contextlib\n"
    "from torch.distributed._tools.memory_tracker import MemoryTracker\n"
    "m = MemoryTracker(); m.load(sys.argv[1])\n"
    "with contextlib.redirect_stdout(io.StringIO()): m.summary(20)\n"
)
PY_PLOT = (
    "import sys, matplotlib\n"
    "matplotlib.use('Agg')\n"
    "import matplotlib.pyplot as plt\n"
    "from torch.distributed._tools.memory_tracker import MemoryTracker\n"
    "MemoryTracker().show_traces(sys.argv[1])\n"
    "for n in plt.get_fignums(): plt.figure(n).savefig(f'{sys.argv[2]}/fig{n}.png')\n"
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    py = os.environ.get("MEMTRACK_PYTHON") or subprocess.check_output(
        [os.path.join(ROOT, "scripts/setup-python.sh")], text=True).strip()
    data = os.path.join(ROOT, "bench/data")
    os.makedirs(data, exist_ok=True)
    stats = os.path.join(data, f"tracker_{args.ops}.pkl")
    if not os.path.exists(stats):
        gen = os.path.join(ROOT, "..", "shared", "bench", "gen_data.py")
        subprocess.check_call([sys.executable, gen, "tracker", stats, "--ops", str(args.ops)])
    exe = os.path.join(ROOT, "target/release/memtrack")
    if not os.path.exists(exe):
        raise SystemExit("build first: cargo build --release")
    print(f"input: {stats} ({os.path.getsize(stats) / 1e6:.0f} MB, {args.ops:,} ops); best of {args.repeat}")
    report("summary --top 20  vs  MemoryTracker().load(p); summary(20)",
           run([exe, "summary", stats, "--top", "20"], args.repeat),
           run([py, "-c", PY_SUMMARY, stats], args.repeat), 30)
    svg = os.path.join(data, "bench.svg")
    report("plot -o out.svg  vs  show_traces(p) + savefig",
           run([exe, "plot", stats, "-o", svg], args.repeat),
           run([py, "-c", PY_PLOT, stats, data], args.repeat), 30)
    print(f"  plot size: {os.path.getsize(svg) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
