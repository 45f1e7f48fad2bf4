"""Load a stats file with PyTorch's own MemoryTracker, as its users would: load(),
summary() and show_traces() (matplotlib's Agg backend, no display)."""

import sys

import matplotlib

matplotlib.use("Agg")

from torch.distributed._tools.memory_tracker import MemoryTracker  # noqa: E402

path = sys.argv[1]
mt = MemoryTracker()
mt.load(path)
n = len(mt.memories_allocated)
assert n == mt._op_index > 0, (n, mt._op_index)
assert len(mt.memories_active) == len(mt.memories_reserved) == n
assert set(mt._markers) == {"fw_start", "fw_bw_boundary"}, mt._markers
name, mib = mt.memories_allocated[0]
assert isinstance(name, str) and isinstance(mib, float)
mt.summary()
mt.show_traces(path)
import matplotlib.pyplot as plt  # noqa: E402

assert len(plt.get_fignums()) == 4
print("OK", n, "ops")
