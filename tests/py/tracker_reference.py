"""PyTorch's own view of a MemoryTracker stats file, as JSON on stdout.

    python tracker_reference.py STATS.pkl TOP[,TOP...] [PNG_DIR]

Loads the file with MemoryTracker().load(), prints what summary(TOP) lists for each TOP, and
when PNG_DIR is given also draws show_traces(path) (matplotlib, Agg backend) and saves every
figure there.
"""
import contextlib
import io
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch.distributed._tools.memory_tracker import MemoryTracker  # noqa: E402

path, tops = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
tracker = MemoryTracker()
tracker.load(path)
listed = {}
for top in tops:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tracker.summary(top)
    lines = buf.getvalue().splitlines()
    listed[str(top)] = []
    for line in lines[3:-1]:  # between the header lines and the closing rule
        name, value = line.rsplit(": ", 1)
        listed[str(top)].append([name, float(value[: -len("MB")])])
out = {
    "top": listed,
    "retries_line": lines[1],
    "op_index": tracker._op_index,
    "markers": dict(tracker._markers),
    "ops": len(tracker.memories_allocated),
}
if len(sys.argv) > 3:
    tracker.show_traces(path)
    for n in plt.get_fignums():
        plt.figure(n).savefig(f"{sys.argv[3]}/figure{n}.png")
    out["figures"] = len(plt.get_fignums())
print(json.dumps(out))
